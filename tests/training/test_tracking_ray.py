"""A Ray run on 2 CPU workers logged to a real MLflow tracking server on loopback, read back through its REST API:
one run across a worker's death and the restart from the checkpoint, every setting as a param, each step's loss
once, the validation loss where evaluated. A run whose tracker is down: test_train_ray.py (its uninterrupted run)."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import local_ray
from training import tracking
from training.config import TrainConfig, validate
from training.records import METRICS_FILE, read_metrics
from training.train import fit

STEPS, EVERY, WORKER_DIES_AT = 6, 3, 5
EXPERIMENT = "tracking-test"

# The server `mlflow server` runs (its FastAPI app under uvicorn, a SQLite store), in one process: without the CLI's
# parent and its job runner, which cost seconds of start-up this test does not use. Uvicorn's access log names every
# REST call the trainer made.
SERVER = """
import os, sys
from mlflow.server import ARTIFACT_ROOT_ENV_VAR, BACKEND_STORE_URI_ENV_VAR
os.environ[BACKEND_STORE_URI_ENV_VAR] = sys.argv[1]
os.environ[ARTIFACT_ROOT_ENV_VAR] = sys.argv[2]
import uvicorn
uvicorn.run("mlflow.server.fastapi_app:app", host="127.0.0.1", port=int(sys.argv[3]), log_level="info")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """(base URL, its log file). Started first: it comes up while the module's Ray starts."""
    folder = tmp_path_factory.mktemp("mlflow")
    port, log = free_port(), folder / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen([sys.executable, "-c", SERVER, f"sqlite:///{folder}/store.db", str(folder / "artifacts"),
                                   str(port)], stdout=out, stderr=subprocess.STDOUT)
    yield f"http://127.0.0.1:{port}", log
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture(scope="module", autouse=True)
def ray_for_the_module(mlflow_server):
    yield from local_ray(3)


def wait_until_up(url: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def config(tmp_path, name: str, **overrides) -> TrainConfig:
    base = TrainConfig(model="tiny", steps=STEPS, seq_len=64, micro_batch=2, lr=3e-3, warmup_steps=2, data="pattern",
                       storage_path=str(tmp_path), run_name=name, checkpoint_every=EVERY, workers=2, local=True, seed=5,
                       val_fraction=0.1, eval_every=EVERY, eval_batches=2)
    return validate(dataclasses.replace(base, **overrides))


def rest(url: str, path: str, **query) -> dict:
    with urllib.request.urlopen(f"{url}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}", timeout=30) as answer:
        return json.load(answer)


@pytest.fixture(scope="module")
def tracked(mlflow_server, tmp_path_factory):
    """A run whose last worker dies at the start of step 5: Ray Train restarts the group from the checkpoint at
    step 3, and the new rank 0 reopens the tracking run (steps 1-4 may have reached it before the death)."""
    url, _ = mlflow_server
    wait_until_up(url)
    storage = tmp_path_factory.mktemp("tracked")
    summary = fit(config(storage, "tracked", tracking="mlflow", mlflow_tracking_uri=url, mlflow_experiment=EXPERIMENT,
                         inject_failure_at_step=WORKER_DIES_AT, max_failures=1, async_checkpoint=False))
    [run] = search_runs(url, EXPERIMENT)  # one run, across the restart
    return summary, storage / "tracked", run


def search_runs(url: str, experiment: str) -> list[dict]:
    experiment_id = rest(url, "experiments/get-by-name", experiment_name=experiment)["experiment"]["experiment_id"]
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/runs/search", method="POST",
                                     data=json.dumps({"experiment_ids": [experiment_id]}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer).get("runs", [])


def history(url: str, run: dict, key: str) -> list[tuple[int, float]]:
    found = rest(url, "metrics/get-history", run_id=run["info"]["run_id"], metric_key=key)["metrics"]
    return sorted((m["step"], m["value"]) for m in found)


def test_the_restarted_run_is_one_tracking_run_named_after_it_with_every_setting_as_a_param(tracked):
    summary, folder, run = tracked
    assert summary["resumed_from_step"] == EVERY  # the restart did happen, from the checkpoint at step 3
    assert run["info"]["run_name"] == "tracked" and run["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert set(params) == {f.name for f in dataclasses.fields(TrainConfig)}
    assert (params["lr"], params["steps"], params["workers"], params["inject_failure_at_step"]) == ("0.003", "6", "2", "5")
    assert json.loads((folder / tracking.TRACKING_FILE).read_text())["mlflow"]["run_id"] == run["info"]["run_id"]


def test_each_steps_loss_is_logged_once_with_the_runs_own_values(tracked, mlflow_server):
    """Steps 4 and 5 were trained twice (before the death and after the restart): the tracker holds each step once,
    and the values are those of metrics.jsonl (an exact resume retrains the same losses). Steps the dead rank 0 had
    not sent yet are sent by the new one from metrics.jsonl."""
    summary, folder, run = tracked
    url, _ = mlflow_server
    own = {r["step"]: r["loss"] for r in read_metrics((folder / METRICS_FILE).read_text())}
    logged = history(url, run, "loss")
    assert [step for step, _ in logged] == list(range(1, STEPS + 1))
    assert [value for _, value in logged] == pytest.approx([own[s] for s in range(1, STEPS + 1)], rel=1e-6)
    assert [step for step, _ in history(url, run, "lr")] == list(range(1, STEPS + 1))


def test_the_validation_loss_is_logged_at_the_steps_that_evaluate(tracked, mlflow_server):
    _, folder, run = tracked
    own = {r["step"]: r["val_loss"] for r in read_metrics((folder / METRICS_FILE).read_text()) if "val_loss" in r}
    logged = history(mlflow_server[0], run, "val_loss")
    assert [step for step, _ in logged] == sorted(own) == [3, 6]
    assert [value for _, value in logged] == pytest.approx([own[3], own[6]], rel=1e-6)


def test_the_health_gates_line_and_the_summary_are_the_runs_tags(tracked):
    _, folder, run = tracked
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["health"].startswith("health gate: passed in ")
    assert tags["summary.step"] == "6" and tags["summary.transport"] == "gloo (CPU): no NCCL"
    assert tags["resumed_from_step"] == "3" and tags["run_uri"] == str(folder)


def test_the_trainer_makes_only_the_rest_calls_the_seams_harness_judges(tracked, mlflow_server):
    """tools/seams grants and judges the pods' calls from tracking.MLFLOW_OPERATIONS: a call the client makes that
    is missing there would be refused on a SageMaker tracking server."""
    _, log = mlflow_server
    called = set(re.findall(r'"(?:GET|POST) (/api/[^ ?]+)', log.read_text()))
    ours = called - {"/api/2.0/mlflow/runs/search"}  # this test's own reads besides those the trainer also makes
    assert "/api/2.0/mlflow/runs/log-batch" in ours and ours <= set(tracking.MLFLOW_OPERATIONS)
