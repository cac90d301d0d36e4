"""Sharded checkpoints of an FSDP2 model, without Ray (its Hugging Face export: test_export.py).

On CPU this runs over gloo; where CUDA GPUs are present (the GPU benchmark machine) over NCCL too,
so the GPU path of save and load is exercised the same way.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

from training import checkpoint as ckpt
from training.config import TrainConfig
from training.data import synthetic_batches
from training.model import build_model
from training.step import make_optimizer, train_step
from tests.process_group import leave, spawn

BACKENDS = ["gloo"] + (["nccl"] if torch.cuda.device_count() >= 2 else [])


def _steps(model, optimizer, batches, device, n: int) -> list[float]:
    losses = []
    for _ in range(n):
        losses.append(train_step(model, optimizer, batches, grad_accum=1, grad_clip=1.0, lr=1e-3, device=device).loss)
    return losses


def _run(rank: int, world: int, backend: str, port: int, folder: str, out: str) -> None:
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    cfg = TrainConfig(model="tiny", seq_len=32, micro_batch=2, seed=3)

    def fresh(position: int):
        model = build_model(cfg, device, rank, world)
        optimizer = make_optimizer(model, 1e-3, 0.1, device)
        return model, optimizer, synthetic_batches("pattern", 3, model.config.vocab_size, 32, 2, rank, world, position)

    model, optimizer, batches = fresh(0)
    _steps(model, optimizer, batches, device, 2)
    ckpt.save(f"{folder}/ckpt", model, optimizer, step=2, data_position=2 * world * 2, rank=rank)  # global rows
    dist.barrier()
    uninterrupted = _steps(model, optimizer, batches, device, 3)

    model, optimizer, _ = fresh(0)
    step, position = ckpt.load(f"{folder}/ckpt", model, optimizer)
    resumed = _steps(model, optimizer, synthetic_batches("pattern", 3, model.config.vocab_size, 32, 2, rank, world,
                                                         ckpt.worker_position(position, world, 2)), device, 3)
    if rank == 0:
        torch.save({"step": step, "position": position, "uninterrupted": uninterrupted, "resumed": resumed}, out)
    leave()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_resume_from_a_sharded_checkpoint(backend, tmp_path):
    out = tmp_path / "result.pt"
    spawn(_run, args=(2, backend, _free_port(), str(tmp_path), str(out)), nprocs=2)
    result = torch.load(out)
    assert (result["step"], result["position"]) == (2, 8)  # 2 steps x 2 workers x 2 sequences
    # Same weights, optimizer state and data position: the same next losses. On GPU, bf16
    # compute and NCCL's reduction order leave rounding differences.
    tolerance = 1e-6 if backend == "gloo" else 2e-3
    torch.testing.assert_close(torch.tensor(result["resumed"]), torch.tensor(result["uninterrupted"]),
                               rtol=tolerance, atol=tolerance)
