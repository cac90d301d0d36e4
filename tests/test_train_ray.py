"""The trainer end to end under Ray Train on local CPU workers: learning, resume, recovery, real data."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import ray
import torch

from training.config import TrainConfig, validate
from training.train import fit
from tests.conftest import DATA

STEPS, EVERY, FAIL_AT = 24, 8, 13


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=3, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}})
    yield
    ray.shutdown()


def config(tmp_path, name: str, **overrides) -> TrainConfig:
    base = TrainConfig(model="tiny", steps=STEPS, seq_len=64, micro_batch=4, lr=3e-3, warmup_steps=4,
                       data="pattern", storage_path=str(tmp_path), run_name=name, checkpoint_every=EVERY,
                       workers=2, local=True, seed=5)
    return validate(dataclasses.replace(base, **overrides))


def losses(summary: dict) -> dict[int, float]:
    return {entry["step"]: entry["loss"] for entry in summary["loss_history"]}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return fit(config(tmp_path_factory.mktemp("runs"), "straight"))


def test_loss_falls_on_learnable_task(uninterrupted):
    curve = losses(uninterrupted)
    assert curve[STEPS] < curve[1] - 0.5, curve  # nats; ln(512) = 6.24 at the start


def test_run_summary_written_to_storage(uninterrupted):
    summary = json.loads((Path(uninterrupted["run"]) / "run_summary.json").read_text())
    assert summary["final_step"] == STEPS and summary["tokens_per_s_per_gpu"] > 0
    assert summary["transport"] == "gloo (CPU): no NCCL"


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """A run stopped by a worker failure (no retries), then run again under the same storage path and name."""
    storage = tmp_path_factory.mktemp("resumed")
    with pytest.raises(Exception):
        fit(config(storage, "resumed", inject_failure_at_step=FAIL_AT, max_failures=0))
    return storage / "resumed", fit(config(storage, "resumed"))


def test_stopped_run_resumes_exactly(resumed, uninterrupted):
    _, summary = resumed
    expected = {s: l for s, l in losses(uninterrupted).items() if s > EVERY}
    got = losses(summary)
    assert min(got) == EVERY + 1  # restarted after the last checkpoint before the failure
    assert got == pytest.approx(expected, rel=1e-6)


def test_metrics_file_holds_one_record_per_step_across_a_resume(resumed, uninterrupted):
    run, _ = resumed
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in records] == pytest.approx([losses(uninterrupted)[s] for s in range(1, STEPS + 1)], rel=1e-6)


def test_worker_failure_recovers_under_failure_config(tmp_path, uninterrupted):
    recovered = fit(config(tmp_path, "recovered", inject_failure_at_step=FAIL_AT, max_failures=1))
    assert recovered["final_step"] == STEPS
    assert recovered["final_loss"] == pytest.approx(uninterrupted["final_loss"], rel=1e-6)


def tiny_pretrained(folder) -> str:
    """A tokenizer trained on the test corpus and a tiny Qwen2 saved beside it: a local 'hub' folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from training.model import builtin_config

    texts = [json.loads(line) for line in (DATA / "corpus.jsonl").read_text().splitlines()]
    corpus = [t["text"] if "text" in t else " ".join(m["content"] for m in t["messages"]) for t in texts]
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>", "<|user|>", "<|assistant|>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<eos>")
    fast.chat_template = "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    fast.save_pretrained(folder)
    config = builtin_config("tiny")
    config.vocab_size = len(fast)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def test_real_text_from_local_model_folder(tmp_path):
    model = tiny_pretrained(tmp_path / "model")
    summary = fit(config(tmp_path, "text", model=model, data=str(DATA / "corpus.jsonl"), steps=4,
                         checkpoint_every=0, seq_len=32, micro_batch=2, export_hf=True))
    curve = losses(summary)
    vocab = json.loads((tmp_path / "model" / "config.json").read_text())["vocab_size"]
    assert summary["final_step"] == 4
    assert curve[1] == pytest.approx(math.log(vocab), abs=0.5)  # a fresh model on real tokens: about ln(vocab)
    assert curve[4] < curve[1]  # and it learns from them
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "text" / "hf-export")
    assert exported.config.num_hidden_layers == 2


def test_a_nan_step_stops_the_run_and_leaves_the_last_good_checkpoint_newest(tmp_path):
    from training.storage import latest_checkpoint

    with pytest.raises(Exception, match=r"step 13: loss nan / gradient norm nan is not finite; stopped before the update"):
        fit(config(tmp_path, "poisoned", inject_nan_at_step=FAIL_AT, max_failures=0))
    newest = latest_checkpoint(str(tmp_path / "poisoned"))
    assert json.loads((Path(newest.path) / "train_state.json").read_text())["step"] == EVERY
    records = [json.loads(line) for line in (tmp_path / "poisoned" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, EVERY + 1))

