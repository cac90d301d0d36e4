"""Cases of training.data that hold both sides of each rule: held-out synthetic blocks are none of the training
stream's, the pattern task always moves, packing is best fit (not first fit), and the records the trainer reads as
text or refuses (an empty list of messages, tool calls on a turn that is not the assistant's)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from training.data import (VALIDATION_SEED_OFFSET, DataFormat, DataError, pack, record_messages,
                           synthetic_block)


@pytest.mark.parametrize("kind", ["random", "pattern"])
def test_held_out_synthetic_blocks_are_not_training_blocks_further_on(kind):
    # Validation block i of seed s is block i of seed s + 7919; a stream seeded as seed + index would make it training
    # block i + 7919 of seed s, which a run of 7,920 blocks (248 steps of 32 rows) trains on.
    for seed in (0, 3):
        for i in range(4):
            held_out = synthetic_block(kind, seed + VALIDATION_SEED_OFFSET, i, 50_000, 16)
            assert not torch.equal(held_out, synthetic_block(kind, seed, i + VALIDATION_SEED_OFFSET, 50_000, 16))


def test_the_pattern_task_always_moves():
    # x_t = (a + d * t) mod vocab with d in 1..7: a sequence never stands still (d = 0 would be one token repeated).
    strides = {int((synthetic_block("pattern", 5, i, 97, 4)[1] - synthetic_block("pattern", 5, i, 97, 4)[0]) % 97)
               for i in range(300)}
    assert strides == set(range(1, 8))


def test_packing_puts_a_piece_where_it_leaves_the_least_room():
    # Blocks of 10: 7 opens block 0 (3 left), 5 opens block 1 (5 left), 4 joins block 1 (1 left). The piece of 1 fits
    # both: best fit puts it in block 1 (1 left, filling it), first fit would put it in block 0.
    docs = [([1] * 7, [True] * 7, False), ([2] * 5, [True] * 5, False), ([3] * 4, [True] * 4, False),
            ([4], [True], False)]
    out = pack(docs, seq_len=10, pad_id=0)
    assert out["input_ids"].tolist() == [[1] * 7 + [0] * 3, [2] * 5 + [3] * 4 + [4]]
    assert out["real_tokens"].tolist() == [7, 10]


def test_a_record_with_an_empty_list_of_messages_is_text():
    # A mixed file: a record with no turns is read by its text field.
    assert record_messages({"messages": [], "text": "plain"}, DataFormat()) is None


@pytest.mark.parametrize("role, refused", [("assistant", False), ("user", True), ("tool", True)])
def test_only_an_assistant_turn_that_calls_tools_may_have_no_content(role, refused):
    call = {"type": "function", "function": {"name": "get_quota", "arguments": {"code": "L-1"}}}
    record = {"messages": [{"role": "user", "content": "Quota?"}, {"role": role, "content": None, "tool_calls": [call]}]}
    if refused:
        with pytest.raises(DataError, match=rf"^--messages-field: a {role} message's content must be a string"):
            record_messages(record, DataFormat())
    else:
        assert record_messages(record, DataFormat())[1] == {"role": "assistant", "content": None, "tool_calls": [call]}


@pytest.mark.parametrize("template", [None, {"default": "{{ messages }}", "tool_use": "{{ tools }}"}],
                         ids=["none", "several"])
def test_a_hub_tokenizer_without_one_chat_template_is_refused(monkeypatch, template):
    # transformers keeps several named templates as a dict: which one is meant is not said, so none is guessed.
    from training.data import chat_template_text

    tokenizer = SimpleNamespace(chat_template=template)
    auto = SimpleNamespace(from_pretrained=lambda source, **_: tokenizer)
    monkeypatch.setitem(sys.modules, "transformers", SimpleNamespace(AutoTokenizer=auto))
    with pytest.raises(DataError, match=r"^--chat-template: org/model's tokenizer has no \(single\) chat template$"):
        chat_template_text("org/model")


class Records:
    """A Ray Dataset of records as packed_dataset uses it: what it is asked to do, in order."""

    def __init__(self):
        self.calls = []

    def repartition(self, blocks):
        self.calls.append(("repartition", blocks))
        return self

    def random_shuffle(self, seed):
        self.calls.append(("random_shuffle", seed.seed, seed.reseed_after_execution))
        return self

    def map_batches(self, fn, **kwargs):
        self.calls.append(("map_batches", fn.__name__, kwargs["fn_kwargs"]))
        return self


@pytest.mark.parametrize("part", ["train", "validation"])
def test_each_side_of_the_split_is_packed_as_that_side(monkeypatch, part):
    from training import data

    records = Records()
    monkeypatch.setattr(data, "read_source", lambda path: records)
    data.packed_dataset("d.jsonl", "tok", 64, DataFormat(), "/cache", revision="r1", part=part, val_fraction=0.2)
    [(_, name, kwargs)] = records.calls
    assert name == "tokenize_and_pack"
    assert (kwargs["part"], kwargs["val_fraction"], kwargs["revision"], kwargs["cache_dir"]) == (part, 0.2, "r1", "/cache")


def test_records_are_shuffled_over_a_fixed_number_of_blocks_with_a_seed_kept_across_executions(monkeypatch):
    # A read makes as many blocks as the cluster has CPUs; the shuffle's order depends on the blocks: a fixed count
    # keeps the order on a resume on another cluster size, and the seed is not re-drawn when the dataset runs again.
    from training import data

    records = Records()
    monkeypatch.setattr(data, "read_source", lambda path: records)
    data.packed_dataset("d.jsonl", "tok", 64, DataFormat(), None, shuffle_seed=17)
    assert records.calls[:2] == [("repartition", 64), ("random_shuffle", 17, False)]


# A template that writes a system turn of its own when the chat has none (as Qwen2.5's does).
DEFAULT_SYSTEM = ("{% if messages[0].role != 'system' %}system: You are a bot.\n{% endif %}"
                  "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")


@pytest.mark.parametrize("chat, rendered", [
    ([{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}],
     [{"role": "system", "content": ""}, {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]),
    # A chat with its own system turn keeps it alone: no empty one before it.
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."}],
     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi."}]),
], ids=["no-system-turn", "own-system-turn"])
def test_no_default_system_prompt_adds_an_empty_system_turn_only_where_there_is_none(monkeypatch, chat, rendered):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from training import data

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"x": 0}, unk_token="x")))
    seen = []
    real = data.render
    monkeypatch.setattr(data, "render", lambda tok, messages, *a, **kw: seen.append(messages) or real(tok, messages, *a, **kw))
    fmt = DataFormat(chat_template=DEFAULT_SYSTEM, default_system_prompt=False, assistant_only_loss=False)
    data.tokenize_records([{"messages": chat}], tokenizer, fmt)
    assert seen[-1] == rendered
