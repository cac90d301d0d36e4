"""check_fit holds a fixed shape to the memory of the run it is: a LoRA run's frozen bf16 base and small adapters,
not a full fine-tune's optimizer state."""

import pytest

from planning.auto import PlanError, check_fit
from training.command_line import parse_args

# Qwen2.5-14B on 2 x g6.12xlarge (8 L4s, 22 GiB usable each), one 2,048-token sequence per micro-batch, every layer
# recomputed: full fine-tuning needs 12 bytes of state a parameter over 8 GPUs and, while 4 micro-batches accumulate,
# the unsharded fp32 gradient (4 bytes a parameter on every GPU: 59 GB); LoRA rank 16 keeps the base in bf16
# (3.7 GB a GPU) and accumulates only its adapters' gradients.
FIXED_14B = ["--model", "qwen2.5-14b", "--instance-type", "g6.12xlarge", "--workers", "8", "--seq-len", "2048",
             "--micro-batch", "1", "--grad-accum", "4", "--activation-checkpointing", "full", "--sharding", "full",
             "--loss-chunk-tokens", "2048"]


def test_a_lora_run_that_fits_is_accepted():
    check_fit(parse_args(FIXED_14B + ["--lora-rank", "16"]))


def test_the_same_shape_fully_fine_tuned_does_not_fit():
    with pytest.raises(PlanError, match=r"^--instance-type: qwen2.5-14b fits in no layout.* or LoRA$"):
        check_fit(parse_args(FIXED_14B))


# 4 x g6.12xlarge, Qwen2.5-1.5B, 1 x 2048 x 4 accumulation: resharding after forward, full sharding gathers every layer
# twice a micro-batch over the 40 Gbit/s network and hybrid is predicted faster; with the weights kept gathered (one
# gather a step) full sharding is. --sharding auto must be asked with the run's own setting.
FOUR_NODES = ["--model", "qwen2.5-1.5b", "--instance-type", "g6.12xlarge", "--workers", "16", "--seq-len", "2048",
              "--micro-batch", "1", "--grad-accum", "4", "--activation-checkpointing", "full", "--sharding", "auto"]


@pytest.mark.parametrize("flag, sharding", [("--reshard-after-forward", "hybrid"), ("--no-reshard-after-forward", "full")])
def test_sharding_auto_is_planned_with_the_runs_own_resharding(flag, sharding):
    from planning.auto import resolve_run

    assert resolve_run(parse_args(FOUR_NODES + [flag])).config.sharding == sharding
