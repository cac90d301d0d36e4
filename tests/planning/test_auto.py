"""auto resolved by the planner before the trainer starts (planning/auto.py): at synth, and by `python -m
planning.train` for a run started by hand. Every refusal is one line naming the option."""

from __future__ import annotations

import pytest

from planning.auto import check_fit, resolve_auto, resolve_run
from planning.train import main, resolved_argv
from training.command_line import parse_args
from training.config import ConfigError

DEFAULT_CLUSTER = ["--model", "Qwen/Qwen2.5-1.5B", "--instance-type", "g6.12xlarge", "--workers", "8", "--seq-len", "2048",
                   "--batch-tokens", "65536", "--loss-chunk-tokens", "2048", "--reduce-dtype", "bf16"]

PLANNER_REFUSED = [
    (["--activation-checkpointing", "auto"], r"^--activation-checkpointing: auto needs a known --instance-type "
     r"\(planning/hardware.py\), whole nodes of workers \(--workers\); set --activation-checkpointing instead$"),
    (["--activation-checkpointing", "auto", "--micro-batch", "auto", "--batch-tokens", "65536", "--workers", "8",
      "--instance-type", "g6.12xlarge", "--model", "/models/mine"], r"^--model: cannot read /models/mine/config.json here "
     r"\(No such file or directory\); .*; or set --micro-batch, --activation-checkpointing and --sharding instead of auto$"),
    (["--activation-checkpointing", "auto", "--workers", "6", "--instance-type", "g6.12xlarge", "--model", "qwen2.5-1.5b"],
     r"^--activation-checkpointing: auto needs a known --instance-type \(planning/hardware.py\), whole nodes of workers"),
    (["--activation-checkpointing", "auto", "--micro-batch", "auto", "--batch-tokens", "65536", "--workers", "8",
      "--instance-type", "g6.12xlarge", "--model", "qwen2.5-14b"],
     r"^--instance-type: qwen2.5-14b fits in no layout, micro-batch or recomputation on 2 x g6.12xlarge"),
    (["--sharding", "auto", "--workers", "8", "--model", "qwen2.5-1.5b"],
     r"^--sharding: auto needs a known --instance-type \(planning/hardware.py\), whole nodes of workers \(--workers\); "
     r"set --sharding full or hybrid instead$"),
    (["--precision", "auto", "--sharding", "full"],
     r"^--precision: auto needs a known --instance-type \(planning/hardware.py\) and model, whole nodes of workers "
     r"\(--workers\); set --precision bf16 or fp8 instead$"),
    (["--instance-type", "x1.large", "--sharding", "full"],
     r"^--instance-type: 'x1.large' is not in planning/hardware.py \(g4dn.xlarge, g5.48xlarge, g6.12xlarge, "),
]


@pytest.mark.parametrize("argv,message", PLANNER_REFUSED, ids=[" ".join(a) for a, _ in PLANNER_REFUSED])
def test_the_planner_refuses_in_one_line_naming_the_option(argv, message):
    with pytest.raises(ConfigError, match=message):
        resolve_run(parse_args(argv))


def test_a_shape_that_fits_no_gpu_of_the_instance_type_is_refused_before_the_run():
    p5 = ["--model", "qwen2.5-1.5b", "--instance-type", "p5.48xlarge", "--workers", "16", "--profile", "h200"]
    with pytest.raises(ConfigError, match=r"^--micro-batch: 8 x 4096 tokens per micro-batch without recomputation needs "
                       r"88.0 GiB/GPU on 2 x p5.48xlarge \(80 GB per GPU\); micro-batch 4 x 2 accumulation"):
        resolve_run(parse_args(p5))
    assert resolve_run(parse_args(p5 + ["--micro-batch", "4", "--grad-accum", "2"])).config.micro_batch == 4  # what it offered fits


def test_a_fixed_shape_that_fits_no_gpu_is_refused():
    """qwen2.5-14b at 1 x 2,048 with full recomputation on 8 L4s: its sharded state alone is past 20.9 GiB."""
    fixed = parse_args(DEFAULT_CLUSTER + ["--model", "qwen2.5-14b", "--micro-batch", "1", "--activation-checkpointing",
                                          "full", "--sharding", "full"])
    with pytest.raises(ConfigError, match=r"^--instance-type: qwen2.5-14b"):
        check_fit(fixed)


def test_auto_picks_a_split_of_the_same_batch_and_says_why():
    """8 workers, 65,536 tokens of 2,048: 4 sequences per worker per step, whatever auto picks."""
    asked = parse_args(DEFAULT_CLUSTER + ["--micro-batch", "auto", "--activation-checkpointing", "auto"])
    assert (asked.micro_batch, asked.activation_checkpointing) == ("auto", "auto")  # validated, still to pick
    picked, line = resolve_auto(asked)
    assert picked.micro_batch * picked.grad_accum == 4 and picked.activation_checkpointing in ("none", "selective", "full")
    assert line.startswith(f"auto: hybrid+bf16, micro-batch {picked.micro_batch} x {picked.grad_accum} accumulation, ")
    assert ": fastest that fits on 2 x g6.12xlarge, ~" in line
    # Only what is auto changes: a micro-batch given stays, and so does the recomputation.
    fixed_micro = resolve_auto(parse_args(DEFAULT_CLUSTER + ["--micro-batch", "2", "--activation-checkpointing", "auto"]))[0]
    assert (fixed_micro.micro_batch, fixed_micro.grad_accum) == (2, 2)
    fixed_recompute = resolve_auto(parse_args(DEFAULT_CLUSTER + ["--micro-batch", "auto", "--activation-checkpointing",
                                                                 "full"]))[0]
    assert fixed_recompute.activation_checkpointing == "full"
    unchanged = parse_args(DEFAULT_CLUSTER + ["--micro-batch", "1", "--activation-checkpointing", "full"])
    assert resolve_auto(unchanged) == (unchanged, None)


def test_the_cluster_run_is_resolved_into_explicit_options_with_the_predicted_figures():
    """The README's default run on 2 x g6.12xlarge: hybrid+bf16, micro-batch 4 x 1, full recomputation, ~2.11 s a
    step; its inter-node link is the instance's 40 Gbit/s (5 GB/s) at the calibrated 60% NCCL efficiency: 3 GB/s."""
    argv, line = resolved_argv(DEFAULT_CLUSTER + ["--micro-batch", "auto", "--activation-checkpointing", "auto"])
    assert argv[-6:-2] == ["--micro-batch=4", "--activation-checkpointing=full", "--sharding=hybrid", "--precision=bf16"]
    assert argv[-2].startswith("--predicted-step-seconds=2.1") and argv[-1] == "--predicted-link-gbps=3.000"
    assert line.startswith("auto: hybrid+bf16, micro-batch 4 x 1 accumulation, full recomputation: fastest that fits")
    resolved = parse_args(argv)
    assert (resolved.micro_batch, resolved.grad_accum, resolved.sharding) == (4, 1, "hybrid")


def test_precision_auto_reaches_the_trainer_as_the_precision_the_planner_picked():
    """planning.train hands the trainer what auto's line says it picked; the trainer refuses auto itself."""
    argv, _ = resolved_argv(P5_FITTING + ["--precision", "auto"])
    assert parse_args(argv).precision == resolve_run(parse_args(P5_FITTING + ["--precision", "auto"])).config.precision
    assert "--precision=fp8" in argv


def test_a_local_run_needs_no_planner_for_its_sharding():
    argv, line = resolved_argv(["--local", "--workers", "2", "--model", "tiny"])
    assert argv[-4:] == ["--micro-batch=4", "--activation-checkpointing=none", "--sharding=full", "--precision=bf16"]
    assert line is None


def test_the_cli_prints_one_line_without_traceback(capsys):
    assert main(["--activation-checkpointing", "auto"]) == 2
    assert capsys.readouterr().err.startswith("error: --activation-checkpointing: auto needs a known --instance-type")


LORA_ON_TWO_OF_FOUR_GPUS = ["--model", "qwen2.5-1.5b", "--instance-type", "g6.12xlarge", "--workers", "2",
                            "--batch-tokens", "65536", "--seq-len", "2048", "--lora-rank", "16"]


def test_auto_plans_a_run_on_part_of_one_node():
    # 2 workers on a 4-GPU g6.12xlarge are not whole nodes, but fewer than one node's GPUs: auto still plans them.
    argv, line = resolved_argv(LORA_ON_TWO_OF_FOUR_GPUS + ["--micro-batch", "auto", "--activation-checkpointing", "auto"])
    assert "--sharding=full" in argv and line.startswith("auto: full, micro-batch ")


def test_a_run_on_part_of_a_node_is_planned_on_the_gpus_it_uses():
    from planning.auto import planned

    _, cluster = planned(parse_args(LORA_ON_TWO_OF_FOUR_GPUS))
    assert (cluster.nodes, cluster.gpus_per_node) == (1, 2)  # 2 of the g6.12xlarge's 4 L4s


P5_FITTING = ["--model", "qwen2.5-1.5b", "--instance-type", "p5.48xlarge", "--workers", "16", "--profile", "h200",
              "--micro-batch", "4", "--grad-accum", "2"]


def test_precision_auto_picks_fp8_on_a_p5_at_the_h200_profile_and_says_why():
    run = resolve_run(parse_args(P5_FITTING + ["--precision", "auto"]))
    assert run.config.precision == "fp8"
    assert run.line.startswith("precision auto: fp8 (fp8 predicted 1.") and run.line.endswith("measured on the H100)")


def test_precision_auto_charges_resharded_weights_a_cast_per_gather():
    # planning/fp8.py: an fp8 weight is cast at each all-gather: kept gathered (the h200 profile), once a step;
    # resharded after forward, twice per micro-batch (forward and backward), here 2 x 4 accumulation = 8. More casts,
    # less gain: auto must predict the resharded run's fp8 gain below the gathered run's (a 7B model at 1,024 tokens
    # a micro-batch, where the casts show in the line's two decimals).
    import dataclasses
    import re

    gathered = parse_args(["--model", "qwen2.5-7b", "--instance-type", "p5.48xlarge", "--workers", "16", "--profile",
                           "h200", "--micro-batch", "1", "--grad-accum", "4", "--seq-len", "1024", "--precision", "auto"])
    assert gathered.reshard_after_forward is False

    def gain(config) -> float:
        return float(re.search(r"fp8 predicted (\d+\.\d+)x", resolve_run(config).line).group(1))

    assert gain(dataclasses.replace(gathered, reshard_after_forward=True)) < gain(gathered)


def test_precision_auto_keeps_bf16_on_the_l4_default_where_fp8_is_unmeasured():
    run = resolve_run(parse_args(DEFAULT_CLUSTER + ["--micro-batch", "1", "--activation-checkpointing", "full",
                                                    "--precision", "auto"]))
    assert run.config.precision == "bf16"
    assert run.line.startswith("precision auto: bf16 (fp8 is unmeasured on the L4 (predicted 0.")


def test_precision_auto_joins_the_line_of_the_other_autos():
    run = resolve_run(parse_args(DEFAULT_CLUSTER + ["--micro-batch", "auto", "--activation-checkpointing", "auto",
                                                    "--precision", "auto"]))
    assert run.line.startswith("auto: ") and "; precision auto: bf16 (" in run.line
