"""Micro-batch gradients accumulate in fp32 under bf16 compute, whatever the reduction dtype.

FSDP2 keeps each micro-batch's gradient in the compute dtype (bf16) and, with gradient sync off,
adds it into an accumulator whose dtype is the policy's reduce dtype; it drops a reduce dtype equal
to the compute dtype (torch/distributed/fsdp/_fully_shard/_fsdp_param.py, init_dtype_attrs and
to_accumulated_grad_if_needed), so a bf16 reduction used to sum 16 micro-batches in bf16.

Reference: each micro-batch's bf16 gradient taken alone, summed in float64. The GPU policy is
applied on CPU tensors (the bf16 casts are device-agnostic) over a one-rank gloo group.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from training.data import synthetic_batches
from training.model import CausalLMWithLoss, apply_fsdp, builtin_config
from tests.process_group import leave, spawn

MICRO_BATCHES = 16


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.to_local().double().flatten() for p in model.parameters()])


def _worker(rank: int, store: str, reduce_dtype: str, out: str) -> None:
    from transformers import AutoModelForCausalLM

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(builtin_config("tiny"), dtype=torch.float32, attn_implementation="eager")
    model = CausalLMWithLoss(lm, loss_chunk_tokens=64)
    # The GPU policy (bf16 compute) on a CPU mesh.
    apply_fsdp(model, torch.device("cuda"), mesh=init_device_mesh("cpu", (1,)), reduce_dtype=reduce_dtype)
    batches = list(__import__("itertools").islice(synthetic_batches("random", 3, 512, 32, 2, 0, 1), MICRO_BATCHES))
    reference = None
    for batch in batches:  # each micro-batch alone: its bf16 gradient, widened exactly
        model.set_requires_gradient_sync(True)
        model(**batch, scale=1.0).backward()
        grad = _grads(model)
        reference = grad if reference is None else reference + grad
        model.zero_grad(set_to_none=True)
    for i, batch in enumerate(batches):  # the same micro-batches accumulated, synced once
        model.set_requires_gradient_sync(i == MICRO_BATCHES - 1)
        model(**batch, scale=1.0).backward()
    accumulated = _grads(model)
    error = ((accumulated - reference).norm() / reference.norm()).item()
    torch.save({"error": error}, out)
    leave()


@pytest.mark.parametrize("reduce_dtype", ["fp32", "bf16"])
def test_sixteen_micro_batches_sum_in_fp32(reduce_dtype, tmp_path):
    out = tmp_path / "result.pt"
    spawn(_worker, args=(str(tmp_path / "store"), reduce_dtype, str(out)), nprocs=1, join=True)
    error = torch.load(out)["error"]
    # fp32 sums of 16 terms: ~1e-7 relative. A bf16 running sum (8 bits of mantissa) is ~1e-3 off.
    assert error < 1e-5, f"accumulated gradient is {error:.2e} off the float64 sum of the micro-batch gradients"


def _wire_worker(rank: int, store: str, out: str) -> None:
    from transformers import AutoModelForCausalLM

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    grads = {}
    for wire in ("fp32", "bf16"):
        torch.manual_seed(0)
        lm = AutoModelForCausalLM.from_config(builtin_config("tiny"), dtype=torch.float32, attn_implementation="eager")
        model = CausalLMWithLoss(lm, loss_chunk_tokens=64)
        apply_fsdp(model, torch.device("cuda"), mesh=init_device_mesh("cpu", (2,)), reduce_dtype=wire)
        batch = next(synthetic_batches("random", 3, 512, 32, 2, rank, 2))
        model(**batch, scale=1.0).backward()
        grads[wire] = torch.cat([p.grad.full_tensor().double().flatten() for p in model.parameters()])
    if rank == 0:
        torch.save({"error": ((grads["bf16"] - grads["fp32"]).norm() / grads["fp32"].norm()).item()}, out)
    leave()


def test_a_bf16_wire_rounds_the_reduce_scatter_once_and_keeps_its_mean(tmp_path):
    """Two ranks, so FSDP2 really calls the reduce-scatter (one rank only copies)."""
    out = tmp_path / "wire.pt"
    spawn(_wire_worker, args=(str(tmp_path / "store"), str(out)), nprocs=2, join=True)
    error = torch.load(out)["error"]
    # bf16 keeps 8 significant bits: one rounding of each operand and of the sum is ~2^-9 = 2e-3 relative.
    # 0 would mean nothing went through bf16; a lost average (sum instead of mean) would be 100% off.
    assert 1e-5 < error < 1e-2, error


def _single_micro_batch_worker(rank: int, store: str, out: str) -> None:
    from transformers import AutoModelForCausalLM

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    grads = {}
    for single in (False, True):
        torch.manual_seed(0)
        lm = AutoModelForCausalLM.from_config(builtin_config("tiny"), dtype=torch.float32, attn_implementation="eager")
        model = CausalLMWithLoss(lm, loss_chunk_tokens=64)
        apply_fsdp(model, torch.device("cuda"), mesh=init_device_mesh("cpu", (2,)), reduce_dtype="bf16",
                   single_micro_batch=single)
        batch = next(synthetic_batches("random", 3, 512, 32, 2, rank, 2))
        model(**batch, scale=1.0).backward()
        grads[single] = torch.cat([p.grad.full_tensor().double().flatten() for p in model.parameters()])
        grads[f"{single} dtype"] = {p.grad.dtype for p in model.parameters()}
    if rank == 0:
        torch.save({"equal": torch.equal(grads[True], grads[False]), "dtypes": grads["True dtype"],
                    "norm": grads[True].norm().item()}, out)
    leave()


def test_one_micro_batch_reduces_bf16_natively_to_the_same_sums_as_the_wire_cast(tmp_path):
    """Two implementations of one bf16 reduction must agree bit for bit: FSDP2's own bf16 reduce-scatter
    (grad_accum 1) and the custom one that widens to fp32 and rounds to bf16 for the wire."""
    out = tmp_path / "single.pt"
    spawn(_single_micro_batch_worker, args=(str(tmp_path / "store"), str(out)), nprocs=2, join=True)
    result = torch.load(out)
    assert result["equal"] and result["norm"] > 0
    assert result["dtypes"] == {torch.float32}  # the sharded gradient the optimizer sees stays fp32


@pytest.mark.parametrize("grad_accum, native", [(1, True), (4, False)])
def test_build_model_reduces_natively_only_when_nothing_accumulates(grad_accum, native, monkeypatch):
    """With micro-batches to sum, the native bf16 path would sum them in bf16 (the first test's failure)."""
    import training.model
    from training.config import TrainConfig

    seen = {}

    def capture(*args, **kwargs):
        seen.update(kwargs)
        raise StopIteration  # the wiring is all this test needs

    monkeypatch.setattr(training.model, "apply_fsdp", capture)
    with pytest.raises(StopIteration):
        training.model.build_model(TrainConfig(model="tiny", grad_accum=grad_accum, reduce_dtype="bf16"),
                                   torch.device("cpu"), 0, 1, full_state={})
    assert seen["single_micro_batch"] is native


def _wire_choice_worker(rank: int, store: str, out: str) -> None:
    import training.model
    from transformers import AutoModelForCausalLM

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh

    seen = {}
    policy, custom = training.model.MixedPrecisionPolicy, training.model.WireDtypeReduceScatter

    def recorded_policy(**kwargs):
        seen["reduce_dtype"] = kwargs["reduce_dtype"]
        return policy(**kwargs)

    def recorded_custom(wire):
        seen["custom"] = True
        return custom(wire)

    training.model.MixedPrecisionPolicy, training.model.WireDtypeReduceScatter = recorded_policy, recorded_custom
    result = {}
    for name, mesh in (("flat", init_device_mesh("cpu", (1,))),
                       ("hybrid", init_device_mesh("cpu", (1, 1), mesh_dim_names=("replicate", "shard")))):
        seen.clear()
        lm = AutoModelForCausalLM.from_config(builtin_config("tiny"), dtype=torch.float32, attn_implementation="eager")
        apply_fsdp(CausalLMWithLoss(lm, 64), torch.device("cuda"), mesh=mesh, reduce_dtype="bf16", single_micro_batch=True)
        result[name] = (seen["reduce_dtype"], "custom" in seen)
    torch.save(result, out)
    leave()


def test_one_micro_batch_keeps_the_custom_wire_on_a_hybrid_mesh(tmp_path):
    """FSDP2 calls the replica all-reduce hook before it widens a bf16 reduction to fp32, so natively the mean
    over replicas would be rounded to bf16 (exact only for a power-of-two replica count): hybrid keeps the fp32
    reduction with the custom bf16 wire; a flat mesh reduces in bf16 natively."""
    out = tmp_path / "choice.pt"
    spawn(_wire_choice_worker, args=(str(tmp_path / "store"), str(out)), nprocs=1, join=True)
    result = torch.load(out)
    assert result["flat"] == (torch.bfloat16, False)
    assert result["hybrid"] == (torch.float32, True)
