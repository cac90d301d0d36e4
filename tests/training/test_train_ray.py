"""The trainer end to end under Ray Train on local CPU workers: learning, resume and recovery on pattern data; and the
runs as a real MLflow tracking server on loopback holds them (training/tracking.py), read through its REST API.

Recovery here is the fault matrix's `core` chain (every fault once; tests/training/fault_chains.py, docs/testing.md)
against the uninterrupted run. That twin runs the workers' own code (training.train.run_worker) in two processes of a
gloo group, not under Ray: each Ray Train worker process spends seconds importing Ray Train, torch and transformers,
the chain already pays that six times, and the twin's rows and losses are what run_worker computes, Ray or not. Real
data, and a run stopped after an epoch boundary and resumed on one worker: test_train_ray_sft."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from training import watchdog
from training.config import TrainConfig
from training.train import fit
from tests.training import fault_chains
from tests.training.conftest import SHAPE, STEPS, assert_only_judged_rest_calls, chain_config, config, losses
from tests.training.mlflow_server import free_port

pytestmark = pytest.mark.usefixtures("ray_with_faults")


def _straight_worker(rank: int, world: int, port: int, cfg: TrainConfig, workspace: str, out: str) -> None:
    """One rank of the uninterrupted run: run_worker as Ray Train's train_func calls it, in a gloo group of its own."""
    import types

    import ray
    import torch
    import torch.distributed as dist

    from training import faults, preemption
    from training.train import run_worker
    from tests.process_group import leave

    # The fork server keeps the environment it started with, which may or may not be this module's fault environment
    # (whichever module spawned first): the row log and the stop folder are set here, no fault or hang reaches the
    # twin either way, and one thread each, as the local Ray's runtime environment gives its workers (the same sums).
    os.environ[faults.ROW_LOG_ENV] = str(Path(workspace) / "rows")
    os.environ[preemption.STOP_DIR_ENV] = str(Path(workspace) / "stop-straight")
    for name in (faults.FAULTS_ENV, watchdog.HANG_AT_STEP_ENV, watchdog.FLOOR_ENV):
        os.environ.pop(name, None)
    torch.set_num_threads(1)
    ray.get_runtime_context = lambda: types.SimpleNamespace(get_node_id=lambda: "local")  # sharding_mesh's node
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    summary = run_worker(cfg, rank, world, torch.device("cpu"))
    if rank == 0:
        Path(out).write_text(json.dumps(summary))
    leave()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, workspace):
    """The run's summary as the driver writes it (write_run_summary, from rank 0's return). Logged to an MLflow
    tracker where nothing listens (training/tracking.py): the run must not notice."""
    from training.driver import write_run_summary
    from tests.process_group import spawn

    cfg = config(tmp_path_factory.mktemp("runs"), "straight", tracking="mlflow",
                 mlflow_tracking_uri=f"http://127.0.0.1:{free_port()}", **SHAPE)
    out, started = workspace / "straight-summary.json", time.time()
    spawn(_straight_worker, args=(cfg.workers, free_port(), cfg, str(workspace), str(out)), nprocs=cfg.workers)
    return write_run_summary(cfg, json.loads(out.read_text()), started)


def test_loss_falls_on_learnable_task(uninterrupted):
    curve = losses(uninterrupted)
    assert curve[STEPS] < curve[1] - 0.5, curve  # nats; ln(512) = 6.24 at the start


def test_each_steps_learning_rate_follows_the_runs_lr_warmup_and_floor(uninterrupted):
    """--lr 3e-3, --warmup-steps 4, --min-lr-ratio 0.2 over 24 steps: linear warmup to the peak on step 4, then a
    cosine from there (0-based step 3) to 0.2 x 3e-3 on the last: halfway, 0-based step 13, it is
    3e-3 x (0.2 + 0.8 x 0.5) = 1.8e-3."""
    from training.records import METRICS_FILE, read_metrics

    lr = {r["step"]: r["lr"] for r in read_metrics((Path(uninterrupted["run"]) / METRICS_FILE).read_text())}
    assert [lr[1], lr[2], lr[4], lr[14], lr[24]] == pytest.approx([7.5e-4, 1.5e-3, 3e-3, 1.8e-3, 6e-4], rel=1e-6)


def test_each_step_line_counts_the_tokens_of_that_step_on_each_gpu(uninterrupted):
    """Synthetic data has no padding: a step line's tokens/s per GPU times its seconds per step is what each of the
    2 workers trained that step, 64 x 2 x 2 = 256 tokens, from the first line on (the counts of a step reach its
    own line; summed over the workers, they are divided by 2)."""
    from training.records import METRICS_FILE, read_metrics

    records = read_metrics((Path(uninterrupted["run"]) / METRICS_FILE).read_text())
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for r in records:
        assert r["tokens_per_s_per_gpu"] * r["step_time_s"] == pytest.approx(64 * 2 * 2, rel=1e-6), r


def test_a_run_whose_tracker_is_down_trains_to_the_end(uninterrupted):
    """Every test above holds for a run whose tracker never answered; it records no tracking run."""
    from training.tracking import TRACKING_FILE

    assert uninterrupted["final_step"] == STEPS
    assert not (Path(uninterrupted["run"]) / TRACKING_FILE).exists()


# ---------------------------------------------------------------- the fault matrix's core chain


@pytest.fixture(scope="module")
def core(workspace, uninterrupted, mlflow_server):
    """Logged to the MLflow server: every retry continues the one tracking run."""
    spec, resumes = fault_chains.CHAINS["core"]
    tracked = {"tracking": "mlflow", "mlflow_tracking_uri": mlflow_server.wait_until_up(), "mlflow_experiment": "core"}
    summary = fit(chain_config(workspace, "core", max_failures=len(resumes), inject_failure_at_step=9, **tracked))
    return fault_chains.outcome(workspace, summary)


def test_core_run_summary_is_written_to_storage_after_its_retries(core):
    summary = json.loads((core["run"] / "run_summary.json").read_text())
    assert summary["final_step"] == STEPS and summary["tokens_per_s_per_gpu"] > 0
    assert summary["transport"] == "gloo (CPU): no NCCL"


def test_core_each_retry_resumes_from_the_step_its_fault_leaves_committed(core):
    """raise@2 -> 0 (before the first checkpoint); NaN@5 with step 4's save in flight -> 4 (the stop finished it);
    step 8's refused upload, then kill@9 -> 4 (step 8 partial); SIGTERM@10 -> 10 (saved on the way out);
    hang@13 with step 12's save in flight -> 12 (the watchdog let it finish)."""
    assert [a["resumed_from"] for a in core["attempts"]] == [0] + fault_chains.CHAINS["core"][1]
    assert core["summary"]["final_step"] == STEPS and core["summary"]["resumed_from_step"] == 12


def test_core_every_step_trained_the_uninterrupted_runs_rows_once(core, workspace, uninterrupted):
    expected = fault_chains.trained_rows(fault_chains.row_log(workspace, "straight"))
    assert list(expected) == list(range(1, STEPS + 1)) and all(len(rows) == 8 for rows in expected.values())
    assert core["rows"] == expected


def test_core_every_steps_loss_is_the_uninterrupted_runs(core, uninterrupted):
    """Same workers, rows, weights, AdamW and random state restored: the same arithmetic (how often a run saves
    changes nothing it computes)."""
    assert core["losses"] == pytest.approx(losses(uninterrupted), rel=1e-6)


def test_core_a_refused_write_leaves_a_partial_save_that_the_retry_names_and_passes_over(core):
    lines = core["attempts"][3]["lines"]
    assert any(" (step 8): no commit marker: " in line for line in lines), lines
    assert lines[-1].startswith("resume: step 4, the newest complete checkpoint (committed): ")


def test_core_the_hang_dumps_every_rank_once(core):
    [attempt] = list((core["run"] / watchdog.DUMP_FOLDER).iterdir())
    # gloo's flight recorder beside the stacks (NCCL's on the cluster: rank<r>-nccl-trace.pkl)
    assert sorted(p.name for p in attempt.iterdir()) == ["rank0-gloo-trace.pkl", "rank0-stacks.txt",
                                                         "rank1-gloo-trace.pkl", "rank1-stacks.txt"]
    hung = (attempt / "rank1-stacks.txt").read_text()
    assert hung.startswith("rank 1: no progress for ") and "waiting for step 13 (bound 6 s)" in hung.splitlines()[0]
    assert "_last_rank_faults" in hung  # the injected block is on the hung rank's stack
    # step 12's upload, held on this rank (faults.SLOW_UPLOAD_S), was still pending when the bound fired
    assert "in before_upload" in hung


def test_core_the_prestop_hook_returns_once_the_step_is_committed_and_the_run_trains_on(core):
    assert (core["run"] / ".prestop-14.out").read_text() == "preStop: the trainer committed a checkpoint of step 14\n"
    assert len(core["attempts"]) == 6  # the hook ended no attempt: on a cluster, Ray ends it when the node drains


def test_worker_failure_recovers_under_failure_config(core):
    """core's kill -9 at step 9 (--inject-failure-at-step): Ray Train restarts the group (one of --max-failures 5),
    from the newest committed checkpoint, step 4."""
    assert (core["run"] / ".fault-injected-failure@9").read_text() == "9"  # it did die
    assert core["attempts"][3]["resumed_from"] == 4 and core["summary"]["final_step"] == STEPS


def test_core_keeps_the_newest_two_checkpoints(core):
    from training.storage import scan_checkpoints

    assert [(f.step, f.complete) for f in scan_checkpoints(str(core["run"]))] == [(20, True), (24, True)]


# ---------------------------------------------------------------- what the MLflow server holds of the runs


def test_the_core_chain_is_one_tracking_run_across_its_five_retries(core, mlflow_server):
    """Six attempts (an exception, a NaN stop, a worker killed, SIGTERM, a hang, then the end): one MLflow run, named
    after the run, every setting a param, finished; its last attempt resumed from step 12."""
    from training.config import TrainConfig
    from training.tracking import TRACKING_FILE

    [run] = mlflow_server.runs("core")
    assert run["info"]["run_name"] == "core" and run["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert set(params) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert (params["lr"], params["steps"], params["workers"], params["inject_failure_at_step"]) == ("0.003", "24", "2", "9")
    assert {t["key"]: t["value"] for t in run["data"]["tags"]}["resumed_from_step"] == "12"
    assert json.loads((core["run"] / TRACKING_FILE).read_text())["mlflow"]["run_id"] == run["info"]["run_id"]


def test_each_steps_loss_is_logged_once_across_the_retries_with_the_runs_own_values(core, mlflow_server):
    """Steps trained twice (before a fault and after the retry: 5-8 and 9-10 among them) are held once, with the
    values of metrics.jsonl (an exact resume retrains the same losses); steps a hung or killed rank 0 never sent
    come from metrics.jsonl."""
    [run] = mlflow_server.runs("core")
    own = {r["step"]: r["loss"] for r in map(json.loads, (core["run"] / "metrics.jsonl").read_text().splitlines())}
    logged = mlflow_server.history(run, "loss")
    assert [step for step, _ in logged] == list(range(1, STEPS + 1))
    assert [value for _, value in logged] == pytest.approx([own[s] for s in range(1, STEPS + 1)], rel=1e-6)
    assert [step for step, _ in mlflow_server.history(run, "lr")] == list(range(1, STEPS + 1))


def test_the_core_chain_makes_only_the_rest_calls_the_seams_harness_judges(core, mlflow_server):
    assert_only_judged_rest_calls(mlflow_server)
