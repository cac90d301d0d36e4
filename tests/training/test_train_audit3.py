"""run_worker where the slow Ray runs alone reached it: a health gate that fails ends the attempt with the hang
watchdog stopped (else it would fire on an attempt already over), the gate's own error re-raised."""

import pytest
import torch
import torch.distributed as dist

from training import health, train, watchdog
from training.config import TrainConfig


class _Watchdog:
    def __init__(self) -> None:
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


def test_a_failed_health_gate_stops_the_watchdog_and_raises_its_own_error(monkeypatch, tmp_path):
    dog = _Watchdog()
    monkeypatch.setattr(watchdog, "for_run", lambda *args, **kwargs: dog)
    monkeypatch.setattr("training.preemption.install_sigterm_handler", lambda: None)

    def gate(cfg, rank, device, log):
        raise RuntimeError("gpu 0: 12.0 TFLOPS, below the gate's 80.0")

    monkeypatch.setattr(health, "gate_for_run", gate)
    cfg = TrainConfig(model="tiny", data="random", seq_len=16, micro_batch=1, workers=1, steps=2,
                      storage_path=str(tmp_path), run_name="gated")
    started_here = not dist.is_initialized()
    if started_here:  # rank 0's choice of the attempt's name is broadcast
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match=r"^gpu 0: 12\.0 TFLOPS, below the gate's 80\.0$"):
            train.run_worker(cfg, 0, 1, torch.device("cpu"))
    finally:
        if started_here:
            dist.destroy_process_group()
    assert dog.stopped == 1
