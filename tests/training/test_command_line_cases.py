"""Cases of training/command_line.py that test_trainer_config.py holds on one side only: auto is a word only
--micro-batch takes among the numbers, the l4 profile's accumulation, and options_argv's zeros and booleans, each
read back by parse_args as the RayJob's entrypoint hands them over."""

from __future__ import annotations

import pytest

from training.command_line import options_argv, parse_args
from training.config import GPU_PROFILES, ConfigError


@pytest.mark.parametrize("option", ["--steps", "--seq-len", "--grad-accum", "--lr"])
def test_auto_is_refused_in_one_line_for_a_number_other_than_the_micro_batch(option):
    kind = "a number" if option == "--lr" else "an integer"
    with pytest.raises(ConfigError, match=f"^{option}: 'auto' is not {kind}$"):
        parse_args([option, "auto"])


def test_the_l4_profile_accumulates_its_four_micro_batches_without_batch_tokens():
    """docs/benchmarks.md, the l4 profile: 1 x 2048 x 4 accum (one 2,048-token sequence per micro-batch, 4 a step)."""
    assert GPU_PROFILES["l4"]["grad_accum"] == 4
    cfg = parse_args(["--profile", "l4"])
    assert (cfg.seq_len, cfg.micro_batch, cfg.grad_accum) == (2048, 1, 4)
    assert parse_args(["--profile", "l4", "--grad-accum", "2"]).grad_accum == 2  # given explicitly, it wins


def test_options_argv_writes_zeros_falses_and_leaves_out_only_none():
    """--warmup-steps 0, --weight-decay 0 and --no-compile are choices: left out, the trainer would use its defaults
    (10 warm-up steps, 0.1 decay, shuffling on)."""
    argv = options_argv({"warmup_steps": 0, "weight_decay": 0.0, "shuffle": False, "compile": True,
                         "model_revision": None, "lr": 0.0003})
    assert argv == ["--warmup-steps=0", "--weight-decay=0.0", "--no-shuffle", "--compile", "--lr=0.0003"]
    cfg = parse_args(argv)
    assert (cfg.warmup_steps, cfg.weight_decay, cfg.shuffle, cfg.compile, cfg.lr) == (0, 0.0, False, True, 0.0003)
