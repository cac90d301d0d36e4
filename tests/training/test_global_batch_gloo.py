"""One global batch (--batch-tokens) on 1, 2 and 4 gloo workers: each derives its own accumulation, and the
training run is the same: same losses step by step, and the same data counted."""

from __future__ import annotations

import torch
import torch.distributed as dist

from training.config import TrainConfig
from training.config_rules import validate
from training.data import synthetic_batches
from training.metrics import DataCounts
from training.model import build_model
from training.step import make_optimizer, train_step
from tests.process_group import leave, spawn

SEQ_LEN, BATCH_TOKENS = 32, 128  # 4 sequences per step: 1 worker x 4 micro-batches, 2 x 2, 4 x 1


def _run(rank: int, world: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    cfg = validate(TrainConfig(model="tiny", seq_len=SEQ_LEN, micro_batch=1, batch_tokens=BATCH_TOKENS, workers=world, seed=1))
    model = build_model(cfg, device, rank, world)
    optimizer = make_optimizer(model, 1e-3, 0.1, device)
    counts = DataCounts()
    batches = counts.counted(synthetic_batches("pattern", 1, model.config.vocab_size, SEQ_LEN, cfg.micro_batch, rank, world))
    losses = []
    for _ in range(3):
        result = train_step(model, optimizer, batches, grad_accum=cfg.grad_accum, grad_clip=1.0, lr=1e-3, device=device,
                            count=counts.drain)
        losses.append(result.loss)
        counts.add(result.sums)
    if rank == 0:
        torch.save({"losses": losses, "grad_accum": cfg.grad_accum, "counts": counts.take()}, out)
    leave()


def run(world: int, tmp_path) -> dict:
    out = tmp_path / f"w{world}.pt"
    spawn(_run, args=(world, str(tmp_path / f"store{world}"), str(out)), nprocs=world)
    return torch.load(out)


def test_the_same_batch_on_one_two_and_four_workers_trains_the_same(tmp_path):
    runs = {world: run(world, tmp_path) for world in (1, 2, 4)}
    assert [runs[w]["grad_accum"] for w in (1, 2, 4)] == [4, 2, 1]
    for world in (2, 4):
        torch.testing.assert_close(torch.tensor(runs[world]["losses"]), torch.tensor(runs[1]["losses"]), rtol=1e-5, atol=1e-6)
    assert runs[1]["losses"][0] != runs[1]["losses"][-1]  # the weights moved: the steps were not all the same


def test_each_step_counts_the_data_of_every_worker(tmp_path):
    """Rank 0's counts after 3 steps are the whole cluster's: 3 x 128 tokens on 1, 2 or 4 workers, all real."""
    for world in (1, 2):
        counts = run(world, tmp_path)["counts"]
        assert counts == {"tokens": 384, "real_tokens": 384, "truncated": 0, "unlearned": 0, "empty_blocks": 0}
