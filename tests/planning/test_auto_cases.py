"""planning/auto.py at its edges: a fixed layout is held to the memory in that layout, and the models' config cache
gains a lookup even when it starts empty."""

from __future__ import annotations

import pytest

from planning import auto
from planning.workload import MODELS
from training.command_line import parse_args
from training.config import ConfigError

# Qwen2.5-7B on 4 x g6.12xlarge (16 L4s of 24 GB), 4 x 2,048 tokens per micro-batch, full recomputation.
SEVEN_B_ON_SIXTEEN_L4S = ["--model", "qwen2.5-7b", "--instance-type", "g6.12xlarge", "--workers", "16", "--seq-len",
                          "2048", "--batch-tokens", "131072", "--loss-chunk-tokens", "2048", "--reduce-dtype", "bf16",
                          "--micro-batch", "4", "--activation-checkpointing", "full"]


def test_a_fixed_hybrid_layout_is_refused_before_the_run_where_only_full_sharding_fits():
    """7.6e9 parameters x 16 bytes of state over a node's 4 GPUs (hybrid) is 30 GB a GPU, past an L4's 24 GB; over
    all 16 (full) it is 7.6 GB. The explicit hybrid must be checked, and checked as hybrid, not as whichever layout
    fits, when the run is resolved (at synth, or before a local run starts)."""
    with pytest.raises(ConfigError, match=r"^--sharding: 4 x 2048 tokens per micro-batch with full recomputation needs "
                                          r"[\d.]+ GiB/GPU on 4 x g6\.12xlarge \(24 GB per GPU\) with hybrid sharding"):
        auto.resolve_run(parse_args(SEVEN_B_ON_SIXTEEN_L4S + ["--sharding", "hybrid"]))
    assert auto.resolve_run(parse_args(SEVEN_B_ON_SIXTEEN_L4S + ["--sharding", "full"])).config.sharding == "full"


def test_the_config_cache_gains_a_lookup_even_when_it_starts_empty(monkeypatch):
    """A fresh clone's cdk.context.json holds no model config yet: the first lookup must still be kept in it, so the
    next synth reads it from the cache."""
    looked_up = {"model-config:org/model@main": {"hidden_size": 1536}}
    monkeypatch.setattr(auto, "model_shape", lambda model, revision, configs: (MODELS["qwen2.5-1.5b"], looked_up))
    configs: dict = {}
    assert auto.model_of(parse_args(["--model", "org/model"]), configs, needed=False) == MODELS["qwen2.5-1.5b"]
    assert configs == looked_up


def test_auto_micro_batch_under_an_explicit_hybrid_layout_is_planned_in_hybrid_only():
    """The same run with micro-batch and recomputation auto: nothing fits in hybrid (its state alone is 30 GB a GPU),
    so auto refuses naming --sharding, rather than picking a shape that fits only under full sharding."""
    argv = SEVEN_B_ON_SIXTEEN_L4S[:-4] + ["--micro-batch", "auto", "--activation-checkpointing", "auto"]
    with pytest.raises(ConfigError, match=r"^--sharding: 4 x 2048 tokens per GPU per step, at any micro-batch, with any "
                                          r"recomputation needs at least [\d.]+ GiB/GPU .* with hybrid sharding"):
        auto.resolve_run(parse_args(argv + ["--sharding", "hybrid"]))
    assert auto.resolve_run(parse_args(argv + ["--sharding", "full"])).config.micro_batch == 4


def test_precision_auto_on_a_model_the_planner_cannot_read_names_the_model():
    """The model is what is missing (its config.json), not the instance type: the refusal names --model."""
    with pytest.raises(ConfigError, match=r"^--model: cannot read /models/mine/config\.json here"):
        auto.resolve_run(parse_args(["--model", "/models/mine", "--instance-type", "g6.12xlarge", "--workers", "8",
                                     "--sharding", "full", "--precision", "auto"]))


def test_a_local_run_with_auto_sharding_needs_no_model_config():
    """One machine: full sharding whatever the model, so a model the planner cannot read is no refusal."""
    resolved = auto.resolve_run(parse_args(["--local", "--model", "/models/mine", "--instance-type", "g6.12xlarge",
                                            "--workers", "4", "--sharding", "auto"]))
    assert resolved.config.sharding == "full" and resolved.estimate is None


# Qwen2.5-1.5B on 2 x g6.12xlarge at a fixed shape: the planner knows the run, so it estimates it.
FIXED = ["--model", "qwen2.5-1.5b", "--instance-type", "g6.12xlarge", "--workers", "8", "--seq-len", "2048",
         "--batch-tokens", "65536", "--loss-chunk-tokens", "2048", "--reduce-dtype", "bf16", "--micro-batch", "1",
         "--activation-checkpointing", "full", "--sharding", "full"]


def test_the_estimate_of_a_lora_run_holds_its_smaller_state():
    """LoRA keeps 2 bytes a frozen weight (bf16) instead of 16 (fp32 weights, gradients, AdamW's moments): the
    estimate must be of the LoRA run, under half the full run's memory."""
    full = auto.resolve_run(parse_args(FIXED)).estimate
    lora = auto.resolve_run(parse_args(FIXED + ["--lora-rank", "16"])).estimate
    assert lora.memory_gib < full.memory_gib / 2


def test_the_estimate_of_weights_kept_gathered_holds_them():
    """--no-reshard-after-forward keeps each layer's gathered weights from forward to backward: more memory."""
    resharded = auto.resolve_run(parse_args(FIXED)).estimate
    gathered = auto.resolve_run(parse_args(FIXED + ["--no-reshard-after-forward"])).estimate
    assert gathered.memory_gib > resharded.memory_gib


@pytest.mark.parametrize("sharding,gpus", [("full", 8), ("hybrid", 4)])
def test_fp8_casts_each_gpus_shard_of_every_gpu_with_full_sharding_and_of_a_nodes_with_hybrid(sharding, gpus):
    c = parse_args(FIXED[:-1] + [sharding])
    _, cluster = auto.planned(c)
    assert auto.fp8_shard(c, cluster) == gpus


# The p5 run where precision auto picks fp8 (test_auto).
P5_FITTING = ["--model", "qwen2.5-1.5b", "--instance-type", "p5.48xlarge", "--workers", "16", "--profile", "h200",
              "--micro-batch", "4", "--grad-accum", "2"]


def test_precision_auto_keeps_bf16_for_a_lora_run_where_it_would_pick_fp8():
    """fp8 trains full weights only."""
    run = auto.resolve_run(parse_args(P5_FITTING + ["--precision", "auto", "--lora-rank", "16"]))
    assert run.config.precision == "bf16" and run.line.endswith("(LoRA trains in bf16 (fp8 trains full weights))")


ONE_NODE_AUTO = {"model": "qwen2.5-1.5b", "instance_type": "g6.12xlarge", "workers": 4, "seq_len": 2048,
                 "batch_tokens": 32768, "micro_batch": "auto", "activation_checkpointing": "auto", "sharding": "auto"}


def test_the_resolved_options_hold_no_auto_and_the_predicted_step_to_the_millisecond():
    resolved, _ = auto.resolve_options(dict(ONE_NODE_AUTO), {})
    assert "auto" not in resolved.values()
    step = auto.resolve_run(parse_args(["--model", "qwen2.5-1.5b", "--instance-type", "g6.12xlarge", "--workers", "4",
                                        "--seq-len", "2048", "--batch-tokens", "32768", "--micro-batch",
                                        str(resolved["micro_batch"]), "--activation-checkpointing",
                                        resolved["activation_checkpointing"], "--sharding", "full"])).estimate.step_s
    assert resolved["predicted_step_seconds"] == pytest.approx(step, abs=5e-4)


def test_one_node_predicts_its_intra_node_link():
    """On one node the collectives cross only the GPUs' link (PCIe on a g6.12xlarge, at most 32 GB/s one way)."""
    resolved, _ = auto.resolve_options(dict(ONE_NODE_AUTO), {})
    assert 0 < resolved["predicted_link_gbps"] < 32
