"""Real data: chat and instruction records to learned tokens, packing with document positions,
the validation split, Hub dataset layouts, and documents kept apart by the attention mask."""

from __future__ import annotations

import json
from unittest import mock

import numpy as np
import pytest
import torch

from tests.conftest import DATA
from training.data import (DataFormat, document_targets, in_validation, pack, model_inputs, record_messages,
                           tokenize_and_pack, tokenize_records)
from training.sources import DataError, hub_data_files, split_of
from training.loss import IGNORE_INDEX
from benchmarks.tiny_model import save_tiny_model

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What does NCCL do with gradients?"},
        {"role": "assistant", "content": "NCCL reduces gradients across nodes."},
        {"role": "user", "content": "And with shards?"}, {"role": "assistant", "content": "NCCL reduces shards over EFA."}]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> str:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", DATA / "chat.jsonl")


@pytest.fixture(scope="module")
def tokenizer(model_folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_folder)


def learned_text(tokenizer, ids, learned) -> str:
    return tokenizer.decode([t for t, keep in zip(ids, learned) if keep])


def test_chat_learns_only_the_assistant_turns(tokenizer):
    [(ids, learned, is_chat)] = tokenize_records([{"messages": CHAT}], tokenizer, DataFormat())
    assert is_chat and ids[-1] == tokenizer.eos_token_id
    assert learned_text(tokenizer, ids, learned) == (
        "NCCL reduces gradients across nodes.<|im_end|>\nNCCL reduces shards over EFA.<|im_end|>\n<|endoftext|>")
    assert sum(learned) < len(ids) / 2


def test_chat_learns_every_token_when_asked(tokenizer):
    [(ids, learned, _)] = tokenize_records([{"messages": CHAT}], tokenizer, DataFormat(assistant_only_loss=False))
    assert all(learned)


def test_plain_text_learns_every_token_and_ends_with_eos(tokenizer):
    [(ids, learned, is_chat)] = tokenize_records([{"text": "NCCL reduces gradients"}], tokenizer, DataFormat())
    assert not is_chat and all(learned)
    assert tokenizer.decode(ids) == "NCCL reduces gradients<|endoftext|>"


def test_a_chat_that_ends_with_the_user_learns_no_eos(tokenizer):
    [(ids, learned, _)] = tokenize_records([{"messages": CHAT[:4]}], tokenizer, DataFormat())
    assert learned[-1] is False and learned_text(tokenizer, ids, learned).endswith("nodes.<|im_end|>\n")


def test_instruction_fields_map_to_a_user_turn_and_a_reply():
    fmt = DataFormat(prompt_fields=("instruction", "input"), response_field="output")
    record = {"instruction": "Summarise.", "input": "NCCL reduces.", "output": "Reduction."}
    assert record_messages(record, fmt) == [{"role": "user", "content": "Summarise.\n\nNCCL reduces."},
                                            {"role": "assistant", "content": "Reduction."}]
    assert record_messages({**record, "input": ""}, fmt)[0]["content"] == "Summarise."


def test_a_record_without_the_fields_names_them(tokenizer):
    with pytest.raises(DataError, match=r"--text-field: a record has neither 'body' nor 'messages' \(fields: content\)"):
        tokenize_records([{"content": "x"}], tokenizer, DataFormat(text_field="body"))


def test_targets_stay_inside_their_document():
    assert document_targets([5, 6, 7, 8], [True, False, True, True]) == [IGNORE_INDEX, 7, 8, IGNORE_INDEX]


def test_packing_best_fit_with_positions_per_document_and_padding():
    docs = [([1, 2, 3, 4, 5], [True] * 5, False), ([6, 7, 8], [True] * 3, False), ([9, 10], [True] * 2, False),
            ([11, 12, 13, 14, 15, 16, 17], [False, False, True, True, True, True, True], True)]
    out = pack(docs, seq_len=8, pad_id=0)
    assert out["input_ids"].tolist() == [[11, 12, 13, 14, 15, 16, 17, 0], [1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 0, 0, 0, 0, 0, 0]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5, 6, 0], [0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 0, 1, 2, 3, 4, 5]]
    I = IGNORE_INDEX
    assert out["labels"].tolist() == [[I, 13, 14, 15, 16, 17, I, I], [2, 3, 4, 5, I, 7, 8, I], [10, I, I, I, I, I, I, I]]


def test_long_text_is_cut_into_blocks_and_a_long_chat_is_truncated():
    text = (list(range(1, 20)), [True] * 19, False)
    chat = (list(range(100, 120)), [True] * 20, True)
    out = pack([text, chat], seq_len=8, pad_id=0)
    rows = out["input_ids"].tolist()
    assert [100, 101, 102, 103, 104, 105, 106, 107] in rows and not any(108 in r for r in rows)
    assert sorted(t for r in rows for t in r if 0 < t < 100) == list(range(1, 20))
    # A cut piece's last token still predicts the next piece's first: the same document.
    assert out["labels"][rows.index(list(range(1, 9)))].tolist()[-1] == 9


def test_the_validation_split_is_by_content_and_about_the_fraction():
    docs = [list(range(i, i + 5)) for i in range(2000)]
    held = [in_validation(d, 0.1) for d in docs]
    assert 150 < sum(held) < 250
    assert held == [in_validation(d, 0.1) for d in docs]
    assert not any(in_validation(d, 0.0) for d in docs)


def test_train_and_validation_sides_partition_the_documents(model_folder):
    records = [json.loads(line) for line in (DATA / "chat.jsonl").read_text().splitlines()[:200]]
    batch = {"messages": np.array([r["messages"] for r in records], dtype=object)}
    common = {"tokenizer_path": model_folder, "seq_len": 64, "fmt": DataFormat(), "val_fraction": 0.2}
    train = tokenize_and_pack(batch, part="train", **common)
    validation = tokenize_and_pack(batch, part="validation", **common)
    everything = tokenize_and_pack(batch, **{**common, "val_fraction": 0.0})
    learned = {k: int((v["labels"] != IGNORE_INDEX).sum()) for k, v in
               {"train": train, "validation": validation, "all": everything}.items()}
    assert learned["train"] + learned["validation"] == learned["all"]
    assert 0.1 < learned["validation"] / learned["all"] < 0.3


@pytest.mark.parametrize("files,split,expected", [
    (["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet", "data/test-00000-of-00001.parquet"],
     "train", ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"]),
    (["train/a.jsonl", "dev/b.jsonl"], "validation", ["dev/b.jsonl"]),
    (["sft.parquet", "README.md"], "train", ["sft.parquet"]),
    (["data/val.jsonl", "data/training.jsonl", ".gitattributes"], "train", ["data/training.jsonl"]),
])
def test_hub_split_files_by_name(files, split, expected):
    assert hub_data_files(files, None, split) == expected


def test_hub_split_files_from_the_dataset_card():
    card = "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train_sft\n    path: data/train_sft-*\n" \
           "  - split: test_sft\n    path: data/test_sft-*\n---\n# A dataset\n"
    files = ["data/train_sft-00000-of-00001.parquet", "data/test_sft-00000-of-00001.parquet"]
    assert hub_data_files(files, card, "test_sft") == ["data/test_sft-00000-of-00001.parquet"]
    with pytest.raises(DataError, match=r"--data: no 'train' split in this dataset \(found: see its dataset card\)"):
        hub_data_files(files, card, "train")


def test_a_missing_hub_split_lists_the_ones_there():
    with pytest.raises(DataError, match=r"no 'validation' split in this dataset \(found: \['test', 'train'\]\)"):
        hub_data_files(["data/train-0.parquet", "data/test-0.parquet"], None, "validation")
    assert split_of("data/validation-00000-of-00001.parquet") == "validation"


def test_a_hub_dataset_without_split_names_has_a_train_split_only():
    """The datasets library's rule (data_files.py get_data_patterns): where no file or folder names a split, every
    file is 'train'. So hf:org/name:validation has no validation split: --val-data is refused, not evaluated on the
    very rows it trains on."""
    files = ["sft.parquet", "more/part-0.jsonl"]
    assert hub_data_files(files, None, "train") == ["more/part-0.jsonl", "sft.parquet"]
    for split in ("validation", "test"):
        with pytest.raises(DataError, match=rf"^--data: no '{split}' split in this dataset \(found: \['train'\]\)$"):
            hub_data_files(files, None, split)


def test_packed_documents_do_not_attend_to_each_other(model_folder):
    """The second document's hidden states are the same packed behind another as alone, and
    differ when the positions run on (plain causal attention): the mask comes from the positions."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_folder).eval()
    first, second = torch.arange(10, 16), torch.arange(30, 39)
    packed = torch.cat([first, second])[None]
    positions = torch.cat([torch.arange(6), torch.arange(9)])[None]
    with torch.no_grad():
        alone = lm.model(input_ids=second[None], use_cache=False).last_hidden_state[0]
        masked = lm.model(input_ids=packed, position_ids=positions, use_cache=False).last_hidden_state[0, 6:]
        leaking = lm.model(input_ids=packed, use_cache=False).last_hidden_state[0, 6:]
    torch.testing.assert_close(masked, alone, rtol=1e-5, atol=1e-5)
    assert (leaking - alone).abs().max() > 1e-3


# flex: what real data trains with on GPU (training.model.attention_kernel). Here it runs uncompiled: the same
# block mask and attention, without Inductor's ~20 s of C++ compilation on the CPU. transformers builds the block
# mask compiled too (masking_utils.flex_attention_mask: create_block_mask(..., _compile=True)), which alone cost
# 37 s of CPU per cold run; built eagerly it is the same mask.
@pytest.mark.parametrize("attention", ["sdpa", "flex_attention"])
def test_the_trainers_loss_of_a_packed_block_is_the_sum_over_its_documents(model_folder, attention, monkeypatch):
    import transformers.masking_utils
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from transformers import AutoModelForCausalLM
    from transformers.integrations.flex_attention import WrappedFlexAttention

    from training.model import CausalLMWithLoss

    monkeypatch.setattr(WrappedFlexAttention, "__call__", lambda self: flex_attention)  # uncompiled
    monkeypatch.setattr(transformers.masking_utils, "create_block_mask",
                        lambda *args, _compile=True, **kwargs: create_block_mask(*args, **kwargs))  # eager
    lm = AutoModelForCausalLM.from_pretrained(model_folder, attn_implementation=attention).eval()
    packed, separate, unmasked = _two_documents_packed_and_apart(CausalLMWithLoss(lm, loss_chunk_tokens=5))
    torch.testing.assert_close(packed, separate, rtol=1e-5, atol=1e-5)
    assert abs(unmasked - separate) > 1e-3


def _two_documents_packed_and_apart(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The summed loss of two documents packed in one block, of each alone (summed), and of the block without
    its positions (plain causal attention across the two)."""
    docs = [([11, 12, 13, 14, 15], [True] * 5, False), ([30, 31, 32, 33, 34, 35, 36], [True] * 7, False)]
    block = {k: torch.from_numpy(v) for k, v in model_inputs(pack(docs, seq_len=12, pad_id=0)).items()}
    with torch.no_grad():
        packed = model(**block)
        separate = sum(model(**{k: torch.from_numpy(v) for k, v in model_inputs(pack([d], seq_len=len(d[0]), pad_id=0)).items()})
                       for d in docs)
        return packed, separate, model(block["input_ids"], block["labels"])


def test_the_trainers_forward_never_reads_the_positions_back_to_the_host(model_folder):
    """transformers' own check for packed documents reads the positions back to the host (a sync that idles the GPU
    once a micro-batch); the trainer builds the masks without it. The control: the model called as transformers
    calls itself does run the check."""
    from transformers import AutoModelForCausalLM

    from training.model import CausalLMWithLoss

    model = CausalLMWithLoss(AutoModelForCausalLM.from_pretrained(model_folder).eval(), loss_chunk_tokens=5)
    docs = [([11, 12, 13, 14, 15], [True] * 5, False), ([30, 31, 32, 33, 34, 35, 36], [True] * 7, False)]
    block = {k: torch.from_numpy(v) for k, v in model_inputs(pack(docs, seq_len=14, pad_id=0)).items()}
    synced = AssertionError("the positions were read back to the host")
    with torch.no_grad(), mock.patch("transformers.masking_utils.find_packed_sequence_indices", side_effect=synced):
        model(**block)
        model(block["input_ids"], block["labels"])
        with pytest.raises(AssertionError, match="read back to the host"):
            model.lm.model(input_ids=block["input_ids"], position_ids=block["position_ids"], use_cache=False)


def _hidden_with_trainers_masks(lm, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """The last hidden states under the masks the trainer builds (training.model.attention_masks)."""
    from training.model import attention_masks

    embeds = lm.model.embed_tokens(input_ids)
    masks = attention_masks(lm.config, embeds, position_ids)
    return lm.model(inputs_embeds=embeds, attention_mask=masks, position_ids=position_ids, use_cache=False).last_hidden_state


def _alone(lm, ids: list[int]) -> torch.Tensor:
    return lm.model(input_ids=torch.tensor([ids]), use_cache=False).last_hidden_state[0]


def test_each_row_of_a_micro_batch_keeps_its_own_documents_apart(model_folder):
    """Two rows packed differently (6 + 6 tokens, and 8 + 4): every document's hidden states are the ones it has
    alone, row by row."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_folder).eval()
    docs = [[list(range(10, 16)), list(range(30, 36))], [list(range(50, 58)), list(range(70, 74))]]
    ids = torch.tensor([sum(row, []) for row in docs])
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3]])
    with torch.no_grad():
        hidden = _hidden_with_trainers_masks(lm, ids, positions)
        for row, (first, second) in enumerate(docs):
            torch.testing.assert_close(hidden[row, :len(first)], _alone(lm, first), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(hidden[row, len(first):], _alone(lm, second), rtol=1e-5, atol=1e-5)


def test_a_one_token_document_is_a_document_of_its_own(model_folder):
    """A document of one token ahead of another: positions 0, 0, 1, 2, ... The second 0 does not follow its
    neighbour, so it starts a document; the second document must not see the first's token."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_folder).eval()
    with torch.no_grad():
        hidden = _hidden_with_trainers_masks(lm, torch.tensor([[7, 11, 12, 13, 14]]), torch.tensor([[0, 0, 1, 2, 3]]))
        alone = _alone(lm, [11, 12, 13, 14])
        leaking = lm.model(input_ids=torch.tensor([[7, 11, 12, 13, 14]]), use_cache=False).last_hidden_state[0, 1:]
    torch.testing.assert_close(hidden[0, 1:], alone, rtol=1e-5, atol=1e-5)
    assert (leaking - alone).abs().max() > 1e-3  # the token it must not see does change them


def test_the_benchmarks_transformers_masks_lever_runs_transformers_own_check(model_folder):
    """The lever that times the masks as they were must be what they were: transformers' check of the positions,
    once a forward, and documents still apart."""
    from transformers import AutoModelForCausalLM
    from transformers import masking_utils

    from benchmarks.levers import LEVERS
    from training.model import CausalLMWithLoss

    model = CausalLMWithLoss(AutoModelForCausalLM.from_pretrained(model_folder).eval(), loss_chunk_tokens=5)
    with LEVERS["transformers-masks"](), mock.patch.object(
            masking_utils, "find_packed_sequence_indices", wraps=masking_utils.find_packed_sequence_indices) as check:
        packed, separate, _ = _two_documents_packed_and_apart(model)
    torch.testing.assert_close(packed, separate, rtol=1e-5, atol=1e-5)
    assert check.call_count == 4  # the packed block, the two documents alone, the block without positions


def test_positions_that_start_no_document_are_left_out_of_the_models_inputs():
    """A block that one document fills runs 0..n-1: plain causal attention needs no positions (and no mask to build);
    a block of two documents keeps them, as does one whose padding starts its own positions."""
    full = pack([([11, 12, 13, 14], [True] * 4, False)], seq_len=4, pad_id=0)
    two = pack([([11, 12], [True] * 2, False), ([30, 31], [True] * 2, False)], seq_len=4, pad_id=0)
    padded = pack([([11, 12, 13], [True] * 3, False)], seq_len=4, pad_id=0)
    assert "position_ids" not in model_inputs(full)
    assert "position_ids" not in model_inputs({k: torch.from_numpy(v) for k, v in full.items()})
    assert model_inputs(two)["position_ids"].tolist() == [[0, 1, 0, 1]]
    assert model_inputs(padded)["position_ids"].tolist() == [[0, 1, 2, 0]]
    rows = {k: np.concatenate([full[k], two[k]]) for k in full}  # the first row plain, the second packed
    assert model_inputs(rows)["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 0, 1]]


def test_a_model_that_builds_its_own_masks_still_keeps_packed_documents_apart():
    """Llama's config lists no layer types and its forward takes no prepared masks: the trainer leaves the masks to
    it (transformers' own check of the positions) and the packed block's loss is still its documents' apart."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from training.model import CausalLMWithLoss

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1)
    packed, separate, unmasked = _two_documents_packed_and_apart(
        CausalLMWithLoss(LlamaForCausalLM(config).eval(), loss_chunk_tokens=5))
    torch.testing.assert_close(packed, separate, rtol=1e-5, atol=1e-5)
    assert abs(unmasked - separate) > 1e-3


def test_a_mixed_file_read_by_ray_data_has_null_or_nan_where_a_record_lacks_a_field(tokenizer):
    docs = tokenize_records([{"text": "NCCL reduces", "messages": float("nan")},
                             {"text": None, "messages": CHAT[1:3]}], tokenizer, DataFormat())
    assert [is_chat for _, _, is_chat in docs] == [False, True]
    with pytest.raises(DataError, match=r"a record has neither 'text' nor 'messages'"):
        tokenize_records([{"text": float("nan"), "messages": None}], tokenizer, DataFormat())


def test_messages_read_from_parquet_are_arrays(tokenizer):
    """Ray Data hands a Parquet list column over as a numpy array of dicts."""
    chat = np.array(CHAT[1:3], dtype=object)
    [(ids, learned, is_chat)] = tokenize_records([{"messages": chat}], tokenizer, DataFormat())
    assert is_chat and learned_text(tokenizer, ids, learned).startswith("NCCL reduces gradients across nodes.")


def test_a_synthetic_stream_resumed_at_a_position_starts_at_that_micro_step():
    """Micro-step m of rank r holds global sequences m*W*B + r*B ...: with 2 workers of 2 sequences each,
    rank 1 resumed at position 3 starts with sequences 3*2*2 + 1*2 = 14 and 15."""
    from training.data import synthetic_batches, synthetic_block

    first = next(synthetic_batches("pattern", 5, 97, 8, 2, rank=1, world_size=2, position=3))
    expected = torch.stack([synthetic_block("pattern", 5, 14, 97, 9), synthetic_block("pattern", 5, 15, 97, 9)])
    assert torch.equal(first["input_ids"], expected[:, :-1]) and torch.equal(first["labels"], expected[:, 1:])


def test_reading_a_source_keeps_the_order_of_its_rows(monkeypatch):
    """Ray Data hands blocks on in the order their tasks finish unless told otherwise (ExecutionOptions.preserve_order,
    False by default in ray/data/_internal/execution/interfaces/execution_options.py): the data position a resume
    skips counts the rows of one fixed order."""
    import ray.data

    from training.sources import read_source

    options = ray.data.DataContext.get_current().execution_options
    monkeypatch.setattr(options, "preserve_order", False)
    monkeypatch.setattr(ray.data, "read_json", lambda path, lines: (path, lines))
    assert read_source("/data/train.jsonl") == ("/data/train.jsonl", True)
    assert options.preserve_order is True


def test_numpy_scalars_of_a_record_become_plain_python_values():
    """Ray Data hands Parquet numbers over as numpy scalars; a chat template's `tojson` cannot serialize them."""
    from training.data import _plain

    plain = _plain({"n": np.int64(3), "x": np.float32(0.5), "flag": np.bool_(True)})
    assert plain == {"n": 3, "x": 0.5, "flag": True}
    assert [type(v) for v in plain.values()] == [int, float, bool]


@pytest.mark.parametrize("message", ["hello", {"content": "no role"}, {"role": 7, "content": "x"}])
def test_a_message_that_is_not_a_role_content_object_names_the_setting(message):
    with pytest.raises(DataError, match=r"^--messages-field: a message is not a \{role, content\} object in record"):
        record_messages({"messages": [message]}, DataFormat())


def test_an_instruction_prompt_that_is_not_text_names_the_prompt_fields():
    fmt = DataFormat(prompt_fields=("instruction", "input"), response_field="output")
    with pytest.raises(DataError, match=r"^--prompt-field: instruction, input must hold text; record"):
        record_messages({"instruction": 3, "output": "yes"}, fmt)
    assert record_messages({"instruction": "Add.", "input": "1+1", "output": "2"}, fmt)[0] == {
        "role": "user", "content": "Add.\n\n1+1"}


def test_chat_records_with_a_tokenizer_without_a_template_ask_for_one(tokenizer, monkeypatch):
    monkeypatch.setattr(tokenizer, "chat_template", None)
    with pytest.raises(DataError, match=r"^--data: chat records need a tokenizer with a chat template.*--chat-template"):
        tokenize_records([{"messages": CHAT}], tokenizer, DataFormat())


def test_a_template_that_refuses_a_record_names_the_record_and_the_templates_words(tokenizer):
    fmt = DataFormat(chat_template="{{ raise_exception('system turns are not supported') }}")
    with pytest.raises(DataError, match=r"^--data: the chat template cannot render record .*: system turns are not "
                                        r"supported$"):
        tokenize_records([{"messages": CHAT}], tokenizer, fmt)


def test_positions_on_a_device_are_kept_without_reading_them():
    """Reading a GPU tensor on the host is a sync each step; a tensor off the CPU (meta here) is kept as is."""
    positions = torch.arange(4, device="meta").expand(2, 4)
    assert "position_ids" in model_inputs({"input_ids": positions, "position_ids": positions})
    assert "position_ids" not in model_inputs({"input_ids": positions, "position_ids": torch.arange(4).expand(2, 4)})


def test_a_hub_tokenizer_with_several_templates_is_refused_as_a_chat_template():
    from types import SimpleNamespace

    from training.data import chat_template_text

    several = SimpleNamespace(chat_template={"default": "{{ x }}", "tool_use": "{{ y }}"})
    with mock.patch("transformers.AutoTokenizer.from_pretrained", return_value=several):
        with pytest.raises(DataError, match=r"^--chat-template: org/model's tokenizer has no \(single\) chat template$"):
            chat_template_text("org/model")
    with mock.patch("transformers.AutoTokenizer.from_pretrained", return_value=SimpleNamespace(chat_template="{{ x }}")):
        assert chat_template_text("org/model") == "{{ x }}"


@pytest.mark.parametrize("part, blocks", [("train", 0), ("validation", 1)])
def test_a_batch_whose_documents_all_fall_on_the_other_side_gives_empty_blocks(model_folder, part, blocks):
    """fraction 1.0: every document is a validation one (hash/2**64 < 1), so the train side gets none, but its
    arrays still carry every column with seq_len columns (Ray Data concatenates them with the other batches')."""
    from training.data import tokenize_and_pack

    batch = {"text": np.array(["NCCL reduces gradients"], dtype=object)}
    out = tokenize_and_pack(batch, model_folder, 16, DataFormat(), part=part, val_fraction=1.0)
    assert sorted(out) == ["input_ids", "labels", "position_ids", "real_tokens", "truncated", "unlearned"]
    assert out["input_ids"].shape == (blocks, 16) and out["labels"].shape == (blocks, 16)
    assert out["position_ids"].shape == (blocks, 16) and out["real_tokens"].shape == (blocks,)
