"""The experiment tracker on rank 0 (training/tracking.py), without Ray: its options' refusals, what a slow, dead
or recovering tracker costs the step, what a resumed run sends, the packages it needs, and W&B's offline files.
The runs end to end against a real MLflow server: test_train_ray.py and test_train_ray_sft.py."""

from __future__ import annotations

import glob
import json
import struct
import time
import types
from pathlib import Path

import pytest

from tests.conftest import ROOT
from training import tracking
from training.command_line import parse_args
from training.config import ConfigError, TrainConfig

ARN = "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/team"

REFUSED = [
    (["--tracking", "tensorboard"], r"--tracking: 'tensorboard' must be one of none, mlflow, wandb"),
    (["--tracking", "mlflow"], r"--tracking: mlflow needs --mlflow-tracking-uri"),
    (["--mlflow-tracking-uri", "http://mlflow:5000"], r"--mlflow-tracking-uri: only used with --tracking mlflow "
                                                       r"\(this run's --tracking is none\)"),
    (["--tracking", "wandb", "--mlflow-experiment", "x"], r"--mlflow-experiment: only used with --tracking mlflow"),
    (["--wandb-project", "p"], r"--wandb-project: only used with --tracking wandb"),
    (["--tracking", "mlflow", "--mlflow-tracking-uri", ARN, "--wandb-entity", "team"],
     r"--wandb-entity: only used with --tracking wandb"),
    (["--tracking", "mlflow", "--mlflow-tracking-uri", "ftp://mlflow:21"], r"--mlflow-tracking-uri: 'ftp://mlflow:21' must be"),
    # The sagemaker-mlflow plugin has no endpoint for the China partition.
    (["--tracking", "mlflow", "--mlflow-tracking-uri", ARN.replace("arn:aws:", "arn:aws-cn:")],
     r"--mlflow-tracking-uri: 'arn:aws-cn:.*partitions aws and aws-us-gov"),
    (["--tracking", "mlflow", "--mlflow-tracking-uri", ARN.replace("mlflow-tracking-server", "notebook-instance")],
     r"--mlflow-tracking-uri: .* must be"),
    (["--tracking", "mlflow", "--mlflow-tracking-uri", ARN, "--mlflow-experiment", "my runs"],
     r"--mlflow-experiment: 'my runs' must be 1 to 256 letters"),
    (["--tracking", "wandb", "--wandb-project", "team/project"], r"--wandb-project: 'team/project' must be 1 to 128"),
    (["--tracking", "wandb", "--wandb-entity", "a;b"], r"--wandb-entity: 'a;b' must be 1 to 128"),
]


@pytest.mark.parametrize("argv,message", REFUSED, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(REFUSED)])
def test_a_tracking_option_the_trainer_cannot_use_is_refused_in_one_line(argv, message):
    with pytest.raises(ConfigError, match=message) as error:
        parse_args(argv)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("uri", ["http://127.0.0.1:5000", "https://mlflow.example.com/team", ARN,
                                 "arn:aws-us-gov:sagemaker:us-gov-west-1:123456789012:mlflow-app/app-0a1b2c3d"])
def test_http_servers_and_sagemaker_tracking_servers_and_apps_are_accepted(uri):
    assert parse_args(["--tracking", "mlflow", "--mlflow-tracking-uri", uri]).mlflow_tracking_uri == uri


def test_the_pinned_packages_are_the_trainers_requirements():
    pins = {line.split("==")[0].lower(): line for line in (ROOT / "requirements-train.txt").read_text().splitlines()
            if "==" in line and not line.startswith("#")}
    assert {pin.split("==")[0]: pins[pin.split("==")[0]] for pin in tracking.PACKAGES.values()} == \
           {pin.split("==")[0]: pin for pin in tracking.PACKAGES.values()}


def test_the_pods_install_only_what_their_image_lacks(monkeypatch):
    """The cluster's image has neither MLflow nor W&B: the runtime env installs the pinned client, and the
    sagemaker-mlflow plugin for an ARN only; where they are importable (this venv), nothing."""
    arn = TrainConfig(tracking="mlflow", mlflow_tracking_uri=ARN)
    http = TrainConfig(tracking="mlflow", mlflow_tracking_uri="http://mlflow:5000")
    assert tracking.runtime_env(arn) == {} and tracking.runtime_env(TrainConfig()) == {}
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda name: None)
    assert tracking.runtime_env(arn)["pip"]["packages"] == ["mlflow-skinny==3.17.2", "sagemaker-mlflow==0.5.0"]
    assert tracking.runtime_env(http)["pip"]["packages"] == ["mlflow-skinny==3.17.2"]
    assert tracking.runtime_env(TrainConfig(tracking="wandb"))["pip"]["packages"] == ["wandb==0.31.0"]
    assert tracking.runtime_env(TrainConfig()) == {}


def test_only_rank_0_opens_a_tracker():
    """Every worker runs the same loop: a tracker on each would log every step once per worker and race on
    tracking.json. Rank 0 alone logs, as in Ray Train's experiment tracking guide."""
    cfg = TrainConfig(tracking="mlflow", mlflow_tracking_uri="http://127.0.0.1:9")
    assert type(tracking.start(cfg, "runs/r", 1, 0, None)) is tracking.Tracker
    assert type(tracking.start(TrainConfig(), "runs/r", 0, 0, None)) is tracking.Tracker


class Backend:
    """A tracker that records what it is sent; open() fails `fails` times, each send() takes `seconds`."""

    where = "a test tracker"

    def __init__(self, holds_up_to: int = 0, fails: int = 0, seconds: float = 0.0) -> None:
        self.holds_up_to, self.fails, self.seconds = holds_up_to, fails, seconds
        self.sent: list[tuple] = []
        self.opened = self.sends = 0

    def open(self, run_uri: str) -> int:
        self.opened += 1
        if self.fails:
            self.fails -= 1
            raise ConnectionError("connection refused")
        return self.holds_up_to

    def send(self, batch: list[tuple]) -> None:
        time.sleep(self.seconds)
        self.sent += batch
        self.sends += 1

    def steps(self) -> list[int]:
        return [value["step"] for kind, value in self.sent if kind == "step"]


def sender(backend: Backend, lines: list[str]) -> tracking.Tracker:
    return tracking._Sender(backend, "runs/r", {"lr": 0.001}, {"health": "ok"}, lines.append)


def step_record(step: int) -> dict:
    return {"time": "2026-12-06T00:00:00Z", "step": step, "steps": 6, "loss": 6.0 - step / 10, "lr": 1e-3}


def test_a_dead_tracker_costs_the_step_a_queue_append_and_warns_once(monkeypatch):
    """Every open fails; 2,000 steps are logged: each call returns in microseconds, one warning is printed, and the
    close does not wait for the tracker (one line counts what was not sent)."""
    monkeypatch.setattr(tracking, "RETRY_S", 0.01)
    lines: list[str] = []
    backend = Backend(fails=10**9)
    tracker = sender(backend, lines)
    started = time.perf_counter()
    for step in range(1, 2001):
        tracker.step(step_record(step))
    per_step = (time.perf_counter() - started) / 2000
    closed = time.perf_counter()
    tracker.close()
    assert per_step < 1e-3 and time.perf_counter() - closed < 2.0
    assert [line.split(" failed ")[0] for line in lines if " failed " in line] == ["tracking: a test tracker"]
    assert lines[-1].startswith("tracking: 2003 record(s) not sent to a test tracker (ConnectionError: connection refused)")
    assert backend.sent == []


def test_steps_logged_meanwhile_neither_hasten_the_retry_nor_each_make_a_request(monkeypatch):
    """200 steps over half a second: a dead tracker is tried once (the next try is RETRY_S later, or at the close),
    and a live one gets them in a few batched sends, not one request per step."""
    monkeypatch.setattr(tracking, "RETRY_S", 30.0)
    monkeypatch.setattr(tracking, "SEND_EVERY_S", 30.0)
    dead, live = Backend(fails=10**9), Backend()
    trackers = [sender(dead, []), sender(live, [])]
    for step in range(1, 201):
        for tracker in trackers:
            tracker.step(step_record(step))
        time.sleep(0.0025)
    assert dead.opened == 1
    for tracker in trackers:
        tracker.close()
    # The first send, then the 201 records left and the end in batches of 50 at the close: 6 requests, not 200.
    assert live.sends <= 1 + -(-202 // tracking.BATCH) and live.steps() == list(range(1, 201))


def test_a_slow_tracker_is_waited_for_at_the_end_only_up_to_its_bound(monkeypatch):
    monkeypatch.setattr(tracking, "CLOSE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(tracking, "BATCH", 1)
    lines: list[str] = []
    tracker = sender(Backend(seconds=0.2), lines)
    started = time.perf_counter()
    for step in range(1, 21):
        tracker.step(step_record(step))
    assert time.perf_counter() - started < 0.1  # 20 steps never waited for a 0.2 s send
    tracker.close()
    assert time.perf_counter() - started < 2.0
    assert "(still sending after 0.5 s)" in lines[-1]


def test_a_tracker_that_comes_back_gets_every_queued_step_in_order(monkeypatch):
    monkeypatch.setattr(tracking, "RETRY_S", 0.05)
    lines: list[str] = []
    backend = Backend(fails=3)
    tracker = sender(backend, lines)
    for step in range(1, 4):
        tracker.step(step_record(step))
    deadline = time.monotonic() + 5
    while not backend.sent and time.monotonic() < deadline:  # down for three tries, then back during the run
        time.sleep(0.02)
    for step in range(4, 7):
        tracker.step(step_record(step))
    tracker.close()
    assert backend.steps() == [1, 2, 3, 4, 5, 6]
    assert [kind for kind, _ in backend.sent][:2] == ["params", "tags"] and backend.sent[-1] == ("end", ("FINISHED", {}))
    assert len([line for line in lines if " failed " in line]) == 1


def test_a_tracker_back_from_a_failure_is_waited_for_at_the_end_like_any_other(monkeypatch):
    """Down once, then slow (1.2 s a send): the close waits for the last send as for a tracker that never failed."""
    monkeypatch.setattr(tracking, "RETRY_S", 0.05)
    lines: list[str] = []
    backend = Backend(fails=1, seconds=1.2)
    tracker = sender(backend, lines)
    tracker.step(step_record(1))
    deadline = time.monotonic() + 10
    while not backend.sent and time.monotonic() < deadline:
        time.sleep(0.02)
    tracker.step(step_record(2))
    tracker.close()
    assert backend.steps() == [1, 2] and not any("not sent" in line for line in lines)


def test_a_tracker_down_past_its_queue_gets_the_newest_steps_and_the_end(monkeypatch):
    """Room for 5 records; the tracker is down while 10 steps are logged (with the params and tags, 12 records):
    the oldest go, so when it is back at the close it gets steps 7-10 and the run's end, what the user looks at."""
    monkeypatch.setattr(tracking, "MAX_PENDING", 5)
    monkeypatch.setattr(tracking, "RETRY_S", 30.0)
    backend = Backend(fails=1)
    tracker = sender(backend, [])
    deadline = time.monotonic() + 5
    while not backend.opened and time.monotonic() < deadline:  # the first try failed; the next is at the close
        time.sleep(0.01)
    for step in range(1, 11):
        tracker.step(step_record(step))
    tracker.close()
    assert backend.steps() == [7, 8, 9, 10] and backend.sent[-1] == ("end", ("FINISHED", {}))


def test_a_resumed_run_sends_only_the_steps_its_tracker_does_not_hold():
    """The checkpoint is at step 3, the tracker holds steps up to 4 (logged before the restart): of the retrained
    steps 4-6, only 5 and 6 are sent."""
    backend = Backend(holds_up_to=4)
    tracker = sender(backend, [])
    for step in range(4, 7):
        tracker.step(step_record(step))
    tracker.close(failed=True)
    assert backend.steps() == [5, 6] and backend.sent[-1] == ("end", ("FAILED", {}))


def test_a_resumed_wandb_run_gets_every_step_after_the_last_one_it_holds(tmp_path, monkeypatch):
    """W&B holds steps up to 4: wandb-core resumes the run with starting_step 5, the step after the last `_step` in
    its history (core/internal/runbranch/resume.go). The retrained steps 4-6 reach run.log as 5 and 6: 4 is not
    logged twice, and 5 is not lost."""
    import sys

    logged = []
    config = types.SimpleNamespace(update=lambda values, allow_val_change: None)
    resumed = types.SimpleNamespace(resumed=True, starting_step=5, config=config, summary={},
                                    log=lambda metrics, step: logged.append(step), finish=lambda exit_code: None)
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kwargs: resumed,
                                                                    Settings=lambda **kwargs: None))
    monkeypatch.delenv(tracking.WANDB_SECRET_ENV, raising=False)
    backend = tracking._Wandb("demo", None, "r", str(tmp_path))
    tracker = tracking._Sender(backend, str(tmp_path), {}, {}, print)
    for step in range(4, 7):
        tracker.step(step_record(step))
    tracker.close()
    assert logged == [5, 6]


class Client:
    """What MlflowClient is asked to log (log_batch) and end (set_terminated)."""

    def __init__(self) -> None:
        self.batches: list[dict] = []
        self.ended: list[str] = []

    def log_batch(self, run_id, metrics=(), params=(), tags=()):
        self.batches.append({"metrics": list(metrics), "params": {p.key: p.value for p in params},
                             "tags": {t.key: t.value for t in tags}})

    def set_terminated(self, run_id, status):
        self.ended.append(status)


class Server:
    """An MLflow server's runs, as MlflowClient(uri) shows them: experiments by name, runs by id."""

    def __init__(self) -> None:
        self.experiments: dict[str, str] = {}
        self.runs: list[str] = []
        self.params: dict[str, dict[str, str]] = {}
        """The params each run holds, by run id."""

    def client(self, uri: str) -> "Server":
        return self

    def get_experiment_by_name(self, name):
        return types.SimpleNamespace(experiment_id=self.experiments[name]) if name in self.experiments else None

    def create_experiment(self, name):
        self.experiments[name] = str(len(self.experiments) + 1)
        return self.experiments[name]

    def create_run(self, experiment_id, run_name=None):
        self.runs.append(f"run{len(self.runs) + 1}")
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id=self.runs[-1]))

    def get_run(self, run_id):
        assert run_id in self.runs
        return types.SimpleNamespace(data=types.SimpleNamespace(params=dict(self.params.get(run_id, {}))))

    def update_run(self, run_id, status):
        pass

    def get_metric_history(self, run_id, key):
        return []


def fake_mlflow(monkeypatch) -> Server:
    import sys

    server = Server()
    monkeypatch.setitem(sys.modules, "mlflow", types.SimpleNamespace(MlflowClient=server.client,
                                                                     set_tracking_uri=lambda uri: None))
    monkeypatch.setitem(sys.modules, "mlflow.exceptions", types.SimpleNamespace(MlflowException=RuntimeError))
    return server


def test_a_retry_continues_the_mlflow_run_its_first_attempt_created(tmp_path, monkeypatch):
    """Each attempt (a job retry, a worker-group restart) opens the tracker anew: the second finds the run the first
    created, under the same tracking URI and experiment, and logs to it (one MLflow run, one curve), and a rerun into
    another experiment gets a run of its own there."""
    server = fake_mlflow(monkeypatch)
    run = str(tmp_path / "r")
    attempts = [tracking._Mlflow("http://mlflow:5000", "team", "r") for _ in range(2)]
    for attempt in attempts:
        attempt.open(run)
    assert [a.run_id for a in attempts] == ["run1", "run1"] and server.runs == ["run1"]
    elsewhere = tracking._Mlflow("http://mlflow:5000", "other", "r")
    elsewhere.open(run)
    assert elsewhere.run_id == "run2" and server.experiments == {"team": "1", "other": "2"}


def test_a_reopened_mlflow_run_sends_a_changed_value_of_a_param_it_holds_as_a_tag(tmp_path, monkeypatch):
    """The retry after a resize reopens the run that holds workers=2 and lr: MLflow refuses a changed param on
    log-batch (INVALID_PARAMETER_VALUE), so workers=1 goes out as a tag and only the new seed as a param."""
    import sys

    import mlflow.entities  # the real entities: send() builds its batch from them

    monkeypatch.setitem(sys.modules, "mlflow.entities", mlflow.entities)
    server = fake_mlflow(monkeypatch)
    run = str(tmp_path / "r")
    tracking._Mlflow("http://mlflow:5000", "team", "r").open(run)
    server.params["run1"] = {"workers": "2", "lr": "0.001"}
    retry = tracking._Mlflow("http://mlflow:5000", "team", "r")
    retry.open(run)
    retry.client = Client()  # what the reopened run is then sent
    retry.send([("params", {"workers": 1, "lr": 0.001, "seed": 5})])
    assert retry.client.batches == [{"metrics": [], "params": {"seed": "5"}, "tags": {"resumed_with.workers": "1"}}]


def test_mlflow_keeps_a_resumed_runs_params_and_tags_the_values_that_changed():
    """MLflow refuses to change a logged param: a rerun on 1 worker instead of 2 logs only the new params, and the
    changed world size as the tag resumed_with.workers."""
    backend = tracking._Mlflow("http://mlflow:5000", None, "r")
    backend.client, backend.run_id = Client(), "abc"
    backend.existing_params = {"workers": "2", "lr": "0.001"}
    backend.send([("params", {"workers": 1, "lr": 0.001, "seed": 5}), ("step", step_record(5) | {"logged_ms": 7}),
                  ("end", ("FINISHED", {"export": "s3://b/runs/r/hf-export"}))])
    [batch] = backend.client.batches
    assert batch["params"] == {"seed": "5"}
    assert batch["tags"] == {"resumed_with.workers": "1", "export": "s3://b/runs/r/hf-export"}
    assert sorted((m.key, m.value, m.step, m.timestamp) for m in batch["metrics"]) == [("loss", 5.5, 5, 7), ("lr", 1e-3, 5, 7)]
    assert backend.client.ended == ["FINISHED"]


def wandb_records(path: str) -> list:
    """The protobuf Records of a .wandb file: a 7-byte header (':W&B', magic 0xBEE1, version 0), then LevelDB's log
    format, 32 KiB blocks of chunks each with a 7-byte header (crc32, little-endian length, type: 1 whole, 2 first,
    3 middle, 4 last); a block's tail under 7 bytes is padding."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    records, partial, at = [], b"", 7
    while at + 7 <= len(data):
        left_in_block = 32768 - at % 32768
        if left_in_block < 7:
            at += left_in_block
            continue
        _, length, kind = struct.unpack("<IHB", data[at:at + 7])
        chunk, at = data[at + 7:at + 7 + length], at + 7 + length
        partial = chunk if kind in (1, 2) else partial + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(partial)
            records.append(record)
    return records


def test_wandb_offline_files_hold_each_steps_metrics_the_settings_and_the_summary(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    run = tmp_path / "r"
    cfg = TrainConfig(tracking="wandb", wandb_project="demo", wandb_entity="ml-team", run_name="r", lr=0.002)
    tracker = tracking.start(cfg, str(run), 0, 0, "health gate: passed in 1.5 s")
    for step in (1, 2, 3):
        tracker.step(step_record(step))
    tracker.summary({"transport": "gloo (CPU): no NCCL", "step": 3, "loss": 5.7, "time": "dropped"})
    tracker.close()
    [path] = glob.glob(str(run / "wandb" / "offline-run-*" / "run-*.wandb"))
    deadline = time.monotonic() + 30
    records = wandb_records(path)
    while "exit" not in {r.WhichOneof("record_type") for r in records} and time.monotonic() < deadline:
        time.sleep(0.1)  # wandb-core, a process of its own, may still be writing the file
        records = wandb_records(path)
    def items(entries) -> dict:  # wandb-core writes a key as nested_key, the Python SDK as key
        return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in entries}

    history = [items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    assert [(h["_step"], h["loss"], h["lr"]) for h in history] == [(1, 5.9, 1e-3), (2, 5.8, 1e-3), (3, 5.7, 1e-3)]
    config = {k: v for r in records if r.WhichOneof("record_type") == "config" for k, v in items(r.config.update).items()}
    assert config["lr"] == 0.002 and config["run_name"] == "r"
    summary = {k: v for r in records if r.WhichOneof("record_type") == "summary" for k, v in items(r.summary.update).items()}
    # The step line's own fields are metrics already: the summary adds the run's (W&B keeps the last loss itself).
    assert summary["transport"] == "gloo (CPU): no NCCL" and summary["step"] == 3 and "time" not in summary
    assert summary["health"] == "health gate: passed in 1.5 s"
    [header] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (header.project, header.entity, header.display_name) == ("demo", "ml-team", "r")
    stored = json.loads((run / tracking.TRACKING_FILE).read_text())["wandb"]
    assert stored == {"project": "demo", "entity": "ml-team", "id": header.run_id}


def test_a_live_steps_mlflow_timestamp_is_milliseconds_since_the_epoch(monkeypatch):
    """MLflow's REST API (runs/log-batch, Metric.timestamp): 'Unix timestamp in milliseconds at the time metric was
    logged'. A step logged live at 2026-12-06T00:00:30.5Z is 1796515230500, as its metrics.jsonl time
    2026-12-06T00:00:30Z is 1796515230000 when a resumed run sends it; in seconds it would plot at January 1970."""
    monkeypatch.setattr(tracking, "time", types.SimpleNamespace(time=lambda: 1796515230.5, monotonic=time.monotonic,
                                                                strptime=time.strptime))
    backend = tracking._Mlflow("http://mlflow:5000", None, "r")
    backend.client, backend.run_id = Client(), "abc"
    backend.open = lambda run_uri: 0
    tracker = sender(backend, [])
    tracker.step(step_record(1))
    tracker.close()
    assert {m.timestamp for batch in backend.client.batches for m in batch["metrics"]} == {1796515230500}
    assert tracking._milliseconds("2026-12-06T00:00:30Z") == 1796515230000


def test_a_resumed_run_hands_its_tracker_the_records_up_to_the_checkpoint(tmp_path, monkeypatch):
    """Rank 0 died at step 6 with steps 3-6 not yet sent: the retry resumes from the checkpoint at step 4, and its
    tracker gets steps 1-4 of metrics.jsonl to send what it lacks (5 and 6 are trained again). Rank 1 logs nothing."""
    from training.records import METRICS_FILE
    from training.worker import run_records

    cfg = TrainConfig(storage_path=str(tmp_path), run_name="r")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / METRICS_FILE).write_text("".join(json.dumps(step_record(s)) + "\n" for s in range(1, 7)))
    handed = {}

    def start(cfg, run_uri, rank, resumed_from, health, earlier=()):
        handed[rank] = (resumed_from, [record["step"] for record in earlier])
        return tracking.Tracker()

    monkeypatch.setattr(tracking, "start", start)
    metrics_log, _ = run_records(cfg, 0, 4, None)
    metrics_log.close()
    assert run_records(cfg, 1, 4, None)[0] is None
    assert handed == {0: (4, [1, 2, 3, 4]), 1: (4, [])}
