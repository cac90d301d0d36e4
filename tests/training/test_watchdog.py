"""The hang watchdog (training/watchdog.py): its allowances on a fake clock, and a real hang over gloo."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time

import torch
import torch.distributed as dist

from training import watchdog


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fake_watchdog(bound_s: float | None = 60.0, log=None):
    clock, fired = FakeClock(), []
    return watchdog.Watchdog(bound_s, fired.append, clock=clock, log=log), clock, fired


def steps_of(dog, clock, seconds: list[float], first: int = 1) -> None:
    """Steps first, first + 1, ... each taking the given seconds after the one before."""
    for step, took in enumerate(seconds, start=first):
        clock.now += took
        dog.step_done(step)


def test_the_bound_is_ten_planned_steps_or_the_60_s_floor():
    assert watchdog.step_bound_s(2.1) == 60.0  # 10 x 2.1 s = 21 s, under the floor
    assert watchdog.step_bound_s(7.5) == 75.0
    assert watchdog.step_bound_s(None) == 60.0


def test_the_first_step_gets_1800_s():
    dog, clock, fired = fake_watchdog()
    clock.now += 1799
    assert not dog.check()
    clock.now += 2
    assert dog.check()
    assert fired == ["no progress for 1801 s waiting for the first step (bound 1800 s)"]


def test_a_later_step_gets_the_bound():
    dog, clock, fired = fake_watchdog()
    dog.step_done(3)
    clock.now += 59
    assert not dog.check()
    clock.now += 2
    assert dog.check()
    assert fired == ["no progress for 61 s waiting for step 4 (bound 60 s)"]


def test_a_completed_step_restarts_the_count():
    dog, clock, fired = fake_watchdog()
    dog.step_done(1)
    clock.now += 50
    dog.step_done(2)
    clock.now += 50
    assert not dog.check()


def test_a_checkpoint_gets_1800_s_and_the_step_its_bound_after_it():
    dog, clock, fired = fake_watchdog()
    dog.step_done(4)
    with dog.long_phase("checkpoint"):
        clock.now += 1700
        assert not dog.check()
    clock.now += 59
    assert not dog.check()
    clock.now += 2
    assert dog.check()


def test_a_slow_data_source_is_no_hang():
    dog, clock, fired = fake_watchdog()
    dog.step_done(1)

    def slow_batches():
        clock.now += 600  # ten minutes for the next batch
        yield "batch"

    assert list(dog.waited(slow_batches())) == ["batch"]
    assert not dog.check()


def test_the_first_step_keeps_its_1800_s_after_its_data_arrives():
    dog, clock, fired = fake_watchdog()
    assert list(dog.waited(["batch"])) == ["batch"]
    clock.now += 1700  # compilation and NCCL's first collectives
    assert not dog.check()


def test_without_a_prediction_healthy_90_s_steps_are_not_a_hang():
    """A run no planner sized (started by hand, or a model of unknown shape), whose steps take 90 s: the first step
    (compilation, 300 s) is not timed; steps 2-4 take 90, 95 and 92 s, so the bound is 10 x 95 = 950 s, and the
    fifth step's 100 s passes. A flat 60 s floor killed step 2 of such a run on every retry."""
    lines = []
    dog, clock, fired = fake_watchdog(None, log=lines.append)
    steps_of(dog, clock, [300, 90, 95, 92])
    assert dog.bound_s == 950.0
    clock.now += 100
    assert not dog.check()
    assert lines == [f"{watchdog.LINE_PREFIX} no planned step time: bound 950 s per step, the larger of 60 s and 10 x "
                     "the slowest of steps 2-4"]


def test_without_a_prediction_the_steps_before_the_bound_is_measured_get_1800_s():
    dog, clock, fired = fake_watchdog(None)
    steps_of(dog, clock, [300, 90])
    clock.now += 1700
    assert not dog.check()
    clock.now += 101
    assert dog.check() and fired == ["no progress for 1801 s waiting for step 3 (bound 1800 s)"]


def test_without_a_prediction_a_hang_after_fast_steps_fires_at_the_60_s_floor():
    """Steps of 0.5 s: 10 x 0.5 = 5 s is under the floor, so the bound is 60 s."""
    dog, clock, fired = fake_watchdog(None)
    steps_of(dog, clock, [20, 0.5, 0.5, 0.5])
    clock.now += 61
    assert dog.check() and fired == ["no progress for 61 s waiting for step 5 (bound 60 s)"]


def test_a_bound_that_is_set_wins_over_the_prediction(tmp_path, monkeypatch):
    """--watchdog-step-seconds 300 with a predicted 2 s step (which would give 60 s): 300 s."""
    monkeypatch.delenv(watchdog.FLOOR_ENV, raising=False)
    dog = watchdog.for_run(str(tmp_path), "a", 0, predicted_step_s=2.0, bound_s=300.0)
    dog.stop()
    assert dog.bound_s == 300.0
    predicted = watchdog.for_run(str(tmp_path), "a", 0, predicted_step_s=2.0)
    predicted.stop()
    assert predicted.bound_s == 60.0


def test_a_hang_lets_the_save_in_flight_finish_before_the_process_ends(tmp_path):
    """dump_and_exit runs before_exit (Checkpoints.finish in a run) after the dump and before the exit."""
    order = []
    watchdog.dump_and_exit(str(tmp_path / "dumps"), 0, "no progress", exit=lambda code: order.append(("exit", code)),
                           grace_s=0, before_exit=lambda: order.append(("finish", (tmp_path / "dumps").exists())))
    assert order == [("finish", True), ("exit", watchdog.EXIT_CODE)]


def test_it_fires_once():
    dog, clock, fired = fake_watchdog()
    clock.now += 5000
    assert dog.check()
    assert not dog.check()
    assert len(fired) == 1


def test_the_watch_finds_the_dump_folders_in_the_log():
    lines = ["step 6/8 loss 2.1",
             f"(RayTrainWorker pid=12) {watchdog.LINE_PREFIX} rank 1: no progress for 61 s waiting for step 7 (bound 60 s); "
             "stacks and NCCL flight recorder in s3://b/runs/r/hang-dumps/20261205T230000Z/; exiting 75 so ...",
             f"{watchdog.LINE_PREFIX} rank 0: no progress for 62 s waiting for step 7 (bound 60 s); "
             "stacks and NCCL flight recorder in s3://b/runs/r/hang-dumps/20261205T230000Z/; exiting 75 so ..."]
    assert watchdog.dump_folders(lines) == ["s3://b/runs/r/hang-dumps/20261205T230000Z"]


BOUND_S = 2.0
POLL_S = 0.2
GRACE_S = 3.0  # the ranks fire within a poll of each other; a loaded 2-core machine writes a dump in about a second


def _hang(rank: int, store: str, run: str) -> None:
    """Both ranks finish one step; then rank 1 blocks before the next all-reduce and rank 0 waits in it."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    folder = f"{run}/{watchdog.DUMP_FOLDER}/attempt-1"
    dog = watchdog.Watchdog(BOUND_S, lambda reason: watchdog.dump_and_exit(folder, rank, reason, grace_s=GRACE_S)
                            ).start(POLL_S)
    dist.all_reduce(torch.ones(4))
    dog.step_done(1)
    with open(f"{run}/step-done.{rank}", "w") as file:
        file.write(repr(time.time()))
    if rank == 1:
        time.sleep(60)
    dist.all_reduce(torch.ones(4))
    os._exit(0)


def test_a_blocked_rank_makes_every_rank_dump_and_exit_75_within_the_bound(tmp_path, monkeypatch):
    for name, value in watchdog.WORKER_ENV.items():  # as the workers get it
        monkeypatch.setenv(name, value)
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_hang, args=(rank, str(tmp_path / "store"), str(tmp_path))) for rank in (0, 1)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=40)
    exited = {rank: (process.exitcode, time.time()) for rank, process in enumerate(processes)}
    for process in processes:
        if process.is_alive():
            process.kill()
    # The blocked rank exits 75. Rank 0's watchdog fires within a poll of it, but whichever rank exits first breaks
    # the other's gloo all-reduce: rank 0 then ends with the exception (1) or gloo's abort (-6) as often as with 75
    # (measured on main: 2 runs of 3 on a loaded 2-core machine). Either fails the Ray attempt; its dump is below.
    assert exited[1][0] == watchdog.EXIT_CODE
    assert exited[0][0] in (watchdog.EXIT_CODE, 1, -6)
    folder = tmp_path / watchdog.DUMP_FOLDER / "attempt-1"
    assert sorted(p.name for p in folder.iterdir()) == ["rank0-gloo-trace.pkl", "rank0-stacks.txt",
                                                         "rank1-gloo-trace.pkl", "rank1-stacks.txt"]
    # The flight recorder shows the mismatch PyTorch's fr_trace analysis looks for: rank 0 entered the second
    # all-reduce, rank 1 never did.
    for rank, last_collective in ((0, 2), (1, 1)):
        entries = pickle.loads((folder / f"rank{rank}-gloo-trace.pkl").read_bytes())["entries"]
        assert [(e["profiling_name"], e["collective_seq_id"]) for e in entries][-1] == ("gloo:all_reduce", last_collective)
    # Each stack shows where its rank stood: rank 0 in the collective, rank 1 in its sleep.
    assert "in _hang" in (folder / "rank0-stacks.txt").read_text()
    assert (folder / "rank1-stacks.txt").read_text().startswith("rank 1: no progress for 2 s waiting for step 2 (bound 2 s)")
    for rank in (0, 1):
        stacks = (folder / f"rank{rank}-stacks.txt").read_text()
        assert 'File "' in stacks
        written = (folder / f"rank{rank}-stacks.txt").stat().st_mtime
        step_done = float((tmp_path / f"step-done.{rank}").read_text())
        fired_after = written - step_done
        print(f"rank {rank}: dumped {fired_after:.2f} s after its last step (bound {BOUND_S} s, poll {POLL_S} s)")
        assert BOUND_S <= fired_after <= BOUND_S + POLL_S + 3.0  # 3 s: a loaded 2-core machine wakes threads late


FLIGHT_RECORDER_PROBE = """
import pickle, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://{store}", rank=0, world_size=1)
dist.all_reduce(torch.ones(3))
print(len(pickle.loads(torch._C._distributed_c10d._dump_fr_trace())["entries"]))
"""


def test_every_worker_keeps_the_flight_recorder_under_torchs_own_setting_name(tmp_path):
    """The buffer-size setting, passed to a real process group as the workers get it: torch 2.13 records the
    collective and does not warn that the name is deprecated (it warns for TORCH_NCCL_TRACE_BUFFER_SIZE)."""
    import subprocess
    import sys

    from training.config import TrainConfig
    from training.driver import worker_env

    env = worker_env(TrainConfig())
    flight_recorder = {k: v for k, v in env.items() if k.startswith(("TORCH_FR_", "TORCH_NCCL_"))}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_"))}
    done = subprocess.run([sys.executable, "-c", FLIGHT_RECORDER_PROBE.format(store=tmp_path / "store")],
                          env=clean | flight_recorder, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    assert "deprecated" not in done.stderr, done.stderr
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000"
