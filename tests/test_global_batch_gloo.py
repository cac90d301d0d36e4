"""One global batch (--batch-tokens) on 1, 2 and 4 gloo workers: each derives its own accumulation, and the
training run is the same: same losses step by step."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from training.config import TrainConfig, validate
from training.data import synthetic_batches
from training.model import build_model
from training.step import make_optimizer, train_step
from tests.process_group import leave

SEQ_LEN, BATCH_TOKENS = 32, 128  # 4 sequences per step: 1 worker x 4 micro-batches, 2 x 2, 4 x 1


def _run(rank: int, world: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    cfg = validate(TrainConfig(model="tiny", seq_len=SEQ_LEN, micro_batch=1, batch_tokens=BATCH_TOKENS, workers=world, seed=1))
    model = build_model(cfg, device, rank, world)
    optimizer = make_optimizer(model, 1e-3, 0.1, device)
    batches = synthetic_batches("pattern", 1, model.config.vocab_size, SEQ_LEN, cfg.micro_batch, rank, world)
    losses = []
    for _ in range(3):
        loss, _ = train_step(model, optimizer, batches, grad_accum=cfg.grad_accum, grad_clip=1.0, lr=1e-3, device=device)
        dist.all_reduce(loss)
        losses.append(loss.item() / world)
    if rank == 0:
        torch.save({"losses": losses, "grad_accum": cfg.grad_accum}, out)
    leave()


def run(world: int, tmp_path) -> dict:
    out = tmp_path / f"w{world}.pt"
    mp.spawn(_run, args=(world, str(tmp_path / f"store{world}"), str(out)), nprocs=world)
    return torch.load(out)


def test_the_same_batch_on_one_two_and_four_workers_trains_the_same(tmp_path):
    runs = {world: run(world, tmp_path) for world in (1, 2, 4)}
    assert [runs[w]["grad_accum"] for w in (1, 2, 4)] == [4, 2, 1]
    for world in (2, 4):
        torch.testing.assert_close(torch.tensor(runs[world]["losses"]), torch.tensor(runs[1]["losses"]), rtol=1e-5, atol=1e-6)
    assert runs[1]["losses"][0] != runs[1]["losses"][-1]  # the weights moved: the steps were not all the same
