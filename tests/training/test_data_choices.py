"""What reaches a library is what the user gave: tools offered in chat rows reach the chat template as
the file's JSON (not the Arrow/numpy values Ray Data hands over), and the validation loss is torch's
mean cross-entropy over the target tokens, whatever each micro-batch holds."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import DATA
from training.data import DataFormat, tokenize_records
from benchmarks.tiny_model import CHAT_TEMPLATE, save_tiny_model

TOOL_ROWS = [
    {"messages": [{"role": "user", "content": "Quota?"}, {"role": "assistant", "content": "Checking."}],
     "tools": [{"type": "function", "function": {"name": "get_quota", "description": "Read a quota", "parameters": {
         "type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}],
     "tools": [{"type": "function", "function": {"name": "list_nodes", "parameters": {
         "type": "object", "properties": {"limit": {"type": "integer"}}, "required": []}}}]},
]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> str:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", DATA / "chat.jsonl")


def as_ray_data_hands_them(path) -> list[dict]:
    """The rows of a JSONL file as a Ray Data numpy batch holds them (its own Arrow-to-numpy conversion):
    lists become numpy arrays, and a struct gains every key another row's struct has, as None."""
    import pyarrow.json
    from ray.data._internal.arrow_block import ArrowBlockAccessor

    batch = ArrowBlockAccessor.for_block(pyarrow.json.read_json(path)).to_batch_format("numpy")
    return [{k: v[i] for k, v in batch.items()} for i in range(len(batch["messages"]))]


def test_offered_tools_reach_the_template_as_the_files_json(tmp_path, model_folder):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    template = "{{ tools | tojson }}\n" + CHAT_TEMPLATE
    path = tmp_path / "tools.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in TOOL_ROWS))
    rows = as_ray_data_hands_them(path)
    assert rows[0]["tools"][0]["function"]["parameters"]["properties"]["limit"] is None  # the Arrow fill, to undo
    documents = tokenize_records(rows, tokenizer, DataFormat(chat_template=template))
    for (ids, _, _), row in zip(documents, TOOL_ROWS):
        expected = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], chat_template=template, tokenize=False)
        assert tokenizer.decode(ids) == expected + tokenizer.eos_token


def test_the_validation_loss_is_torchs_mean_over_the_target_tokens(model_folder):
    """Two micro-batches with 5 and 2 targets: the loss is the mean over all 7 (torch's cross_entropy on
    transformers' own logits), not over all 16 tokens nor the mean of the two micro-batches' means."""
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM

    from training.loss import IGNORE_INDEX
    from training.model import CausalLMWithLoss
    from training.step import evaluate

    lm = AutoModelForCausalLM.from_pretrained(model_folder).float()
    generator = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, lm.config.vocab_size, (1, 8), generator=generator) for _ in range(2)]
    labels = [ids[0].roll(-1, 1), ids[1].roll(-1, 1)]
    labels[0][0, 5:] = IGNORE_INDEX
    labels[1][0, :6] = IGNORE_INDEX
    batches = [{"input_ids": i, "labels": t} for i, t in zip(ids, labels)]
    with torch.no_grad():
        logits = torch.cat([lm(input_ids=i).logits.reshape(-1, lm.config.vocab_size) for i in ids])
        expected = F.cross_entropy(logits.double(), torch.cat(labels).reshape(-1), ignore_index=IGNORE_INDEX)
    loss, targets = evaluate(CausalLMWithLoss(lm), batches, torch.device("cpu"))
    assert targets == 7
    assert loss == pytest.approx(expected.item(), rel=1e-5)
