"""FSDP2 on gloo, without Ray: 1 and 2 workers must compute the same training run."""

from __future__ import annotations

import torch
import torch.distributed as dist

from training.config import TrainConfig
from training.data import synthetic_batches
from training.model import build_model
from training.step import make_optimizer, train_step
from tests.process_group import leave, spawn


def _run(rank: int, world: int, micro_batch: int, store: str, out: str, keep_gathered: bool = False) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    cfg = TrainConfig(model="tiny", seq_len=32, micro_batch=micro_batch, seed=1, reshard_after_forward=not keep_gathered)
    model = build_model(cfg, device, rank, world)
    optimizer = make_optimizer(model, 1e-3, 0.1, device)
    batches = synthetic_batches("pattern", 1, model.config.vocab_size, 32, micro_batch, rank, world)
    losses, norms = [], []
    for _ in range(3):
        loss, norm, _ = train_step(model, optimizer, batches, grad_accum=2, grad_clip=1.0, lr=1e-3, device=device,
                                   keep_weights_gathered=keep_gathered)
        losses.append(loss)
        norms.append(float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm))
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save({"losses": losses, "norms": norms, "weights": weights}, out)
    leave()


def run(world: int, micro_batch: int, tmp_path, keep_gathered: bool = False) -> dict:
    out = tmp_path / f"w{world}-{keep_gathered}.pt"
    spawn(_run, args=(world, micro_batch, str(tmp_path / f"store{world}-{keep_gathered}"), str(out), keep_gathered),
             nprocs=world)
    return torch.load(out)


def test_one_and_two_workers_agree(tmp_path):
    one = run(1, 4, tmp_path)
    two = run(2, 2, tmp_path)
    # Same global batches: identical loss curve and gradient norms; gloo's summed gradients
    # would double the 2-worker norm if they were not divided by the world size.
    torch.testing.assert_close(torch.tensor(one["losses"]), torch.tensor(two["losses"]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.tensor(one["norms"]), torch.tensor(two["norms"]), rtol=1e-4, atol=1e-6)
    # Adam turns float-rounding differences of near-zero gradients into up to ~1% of one
    # lr-sized update (1e-3), hence the absolute tolerance on weights.
    for name, weight in one["weights"].items():
        torch.testing.assert_close(weight, two["weights"][name], rtol=1e-4, atol=2e-5, msg=lambda m: f"{name}: {m}")


def test_keeping_weights_gathered_through_accumulation_changes_nothing_but_communication(tmp_path):
    resharded = run(2, 2, tmp_path)
    kept = run(2, 2, tmp_path, keep_gathered=True)
    torch.testing.assert_close(torch.tensor(kept["losses"]), torch.tensor(resharded["losses"]), rtol=0, atol=0)
    for name, weight in kept["weights"].items():
        torch.testing.assert_close(weight, resharded["weights"][name], rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
