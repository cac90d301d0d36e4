"""--seq-len is checked against the positions of a Hub model the trainer does not know, read from its
config.json before Ray starts (no download here: the Hub's config is stood in for)."""

from __future__ import annotations

import pytest

from training.train import main

ARGS = ["--data", "pattern", "--local", "--micro-batch", "1", "--activation-checkpointing", "none", "--sharding", "full"]


@pytest.fixture
def hub_config(monkeypatch):
    """transformers' AutoConfig answers for the Hub as Llama-3.2-1B's config.json would (131,072 positions
    there; 2,048 here, to keep the test's sequences short), recording what was asked."""
    import transformers

    asked = []

    def from_pretrained(model, revision=None, cache_dir=None, **kwargs):
        asked.append((model, revision))
        return transformers.LlamaConfig(max_position_embeddings=2048)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", from_pretrained)
    monkeypatch.setattr("training.train.fit", lambda cfg: pytest.fail("Ray would start: the refusal comes too late"))
    return asked


def test_a_seq_len_past_an_unknown_hub_models_positions_is_refused_in_one_line(hub_config, capsys):
    code = main(["--model", "meta-llama/Llama-3.2-1B", "--model-revision", "abc123", "--seq-len", "4096", *ARGS])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1
    assert "--seq-len: 4096 exceeds meta-llama/Llama-3.2-1B's 2048 positions" in error
    assert hub_config == [("meta-llama/Llama-3.2-1B", "abc123")]


def test_a_known_hub_model_is_checked_without_reading_the_hub(hub_config, capsys):
    assert main(["--model", "Qwen/Qwen2.5-1.5B", "--seq-len", "65536", *ARGS]) == 2
    assert "exceeds Qwen/Qwen2.5-1.5B's 32768 positions" in capsys.readouterr().err and hub_config == []


def test_a_hub_model_that_cannot_be_read_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    # transformers' own answer, offline (tests/conftest.py): an OSError that used to end the run in a traceback.
    monkeypatch.setattr("training.train.fit", lambda cfg: pytest.fail("Ray would start: the refusal comes too late"))
    code = main(["--model", "nosuch-org/nosuch-model", "--cache-dir", str(tmp_path), *ARGS])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and "Traceback" not in error
    assert error.startswith("error: --model: cannot read nosuch-org/nosuch-model's config.json (")
    assert error.endswith("give a Hub model id that exists and this machine can reach (or has in --cache-dir), "
                          "or a local folder with a config.json\n")
