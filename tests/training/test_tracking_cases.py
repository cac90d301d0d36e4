"""Cases of training/tracking.py that test_tracking.py holds on one side only: the names' length limits, what a
tracking run is opened with (tags, earlier records' times), what reaches MLflow's log-batch and in how many calls,
which stored run is reopened, and what a W&B rerun continues."""

from __future__ import annotations

import sys
import types

import pytest

from tests.training.test_tracking import Client
from training import tracking
from training.config import TrainConfig

ARN = "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/team"


@pytest.mark.parametrize("changes,refused", [
    # SageMaker's MlflowExperimentName pattern: 1 to 256 characters.
    ({"tracking": "mlflow", "mlflow_tracking_uri": ARN, "mlflow_experiment": "e" * 256}, None),
    ({"tracking": "mlflow", "mlflow_tracking_uri": ARN, "mlflow_experiment": "e" * 257}, "--mlflow-experiment"),
    # W&B project and entity names: at most 128 characters.
    ({"tracking": "wandb", "wandb_project": "p" * 128, "wandb_entity": "t" * 128}, None),
    ({"tracking": "wandb", "wandb_project": "p" * 129}, "--wandb-project"),
    ({"tracking": "wandb", "wandb_entity": "t" * 129}, "--wandb-entity"),
    # An http(s) server on any port up to 65535; a SageMaker account id is 12 digits.
    ({"tracking": "mlflow", "mlflow_tracking_uri": "http://mlflow.internal:65535/team"}, None),
    ({"tracking": "mlflow", "mlflow_tracking_uri": ARN.replace("123456789012", "12345678901")}, "--mlflow-tracking-uri"),
])
def test_tracking_names_are_accepted_up_to_their_limit_and_refused_past_it(changes, refused):
    problem = tracking.option_problem(TrainConfig(**changes))
    assert (problem.split(":")[0] if problem else None) == refused


class Backend:
    """A tracker that records what it is sent and holds nothing yet."""

    where = "a test tracker"

    def __init__(self, *args) -> None:
        self.sent: list[tuple] = []

    def open(self, run_uri: str) -> int:
        return 0

    def send(self, batch: list[tuple]) -> None:
        self.sent += batch


def started(monkeypatch, **kwargs) -> Backend:
    """What tracking.start sends its tracker before any step, the run closed at once."""
    backends = []
    monkeypatch.setattr(tracking, "_Mlflow", lambda *args: backends.append(Backend()) or backends[-1])
    cfg = TrainConfig(tracking="mlflow", mlflow_tracking_uri="http://mlflow:5000")
    tracker = tracking.start(cfg, "s3://bucket/runs/r", 0, **kwargs)
    tracker.close()
    return backends[0]


def test_a_resumed_run_is_tagged_with_its_checkpoint_step_and_its_health_line(monkeypatch):
    sent = started(monkeypatch, resumed_from=40, health="health gate: passed in 2.0 s").sent
    assert ("tags", {"run_uri": "s3://bucket/runs/r", "health": "health gate: passed in 2.0 s",
                     "resumed_from_step": "40"}) in sent


def test_a_fresh_run_has_no_resumed_from_step_tag(monkeypatch):
    sent = started(monkeypatch, resumed_from=0, health=None).sent
    assert ("tags", {"run_uri": "s3://bucket/runs/r"}) in sent


def test_earlier_records_go_out_at_the_time_they_were_logged(monkeypatch):
    """metrics.jsonl's times are UTC: 2026-12-06T00:00:30Z is 1796515230 s since the epoch (date -u -d ... +%s);
    every earlier record is sent at its own time (not now), the first included."""
    earlier = [{"time": "2026-12-06T00:00:30Z", "step": 1, "loss": 6.0}, {"time": "2026-12-06T00:01:30Z", "step": 2, "loss": 5.0}]
    sent = started(monkeypatch, resumed_from=2, health=None, earlier=earlier).sent
    assert [(value["step"], value["logged_ms"]) for kind, value in sent if kind == "step"] == [
        (1, 1796515230000), (2, 1796515290000)]


@pytest.fixture
def mlflow_backend():
    backend = tracking._Mlflow("http://mlflow:5000", None, "r")
    backend.client, backend.run_id = Client(), "abc"
    return backend


def test_each_log_batch_stays_within_mlflows_limits(mlflow_backend):
    """MLflow's log-batch takes at most 1000 metrics, 100 params and 100 tags a call (mlflow.utils.validation):
    100 steps of 9 metrics (900) and 150 params and 150 tags go out in two calls, nothing lost."""
    steps = [("step", {"step": s, "logged_ms": 1, **{f"m{i}": float(i) for i in range(9)}}) for s in range(1, 101)]
    params = ("params", {f"p{i}": i for i in range(150)})
    tags = ("tags", {f"t{i}": str(i) for i in range(150)})
    mlflow_backend.send(steps + [params, tags])
    batches = mlflow_backend.client.batches
    assert [(len(b["metrics"]), len(b["params"]), len(b["tags"])) for b in batches] == [(800, 100, 100), (100, 50, 50)]
    assert all(len(b["metrics"]) + len(b["params"]) + len(b["tags"]) <= 1000 for b in batches)


def test_the_summary_goes_out_as_summary_tags_and_the_end_with_its_status(mlflow_backend):
    mlflow_backend.send([("summary", {"step": 40, "transport": "EFA"}), ("end", ("FAILED", {"export": "s3://b/x"}))])
    [batch] = mlflow_backend.client.batches
    assert batch["tags"] == {"summary.step": "40", "summary.transport": "EFA", "export": "s3://b/x"}
    assert mlflow_backend.client.ended == ["FAILED"]


def test_a_param_sent_once_is_not_sent_again(mlflow_backend):
    """A retry's params (the same values) after the first send: MLflow holds them; sending them again is refused
    only when a value changed, so the second send carries a changed one as a tag, never as a param."""
    mlflow_backend.send([("params", {"workers": 2})])
    mlflow_backend.send([("params", {"workers": 1})])
    assert [b["params"] for b in mlflow_backend.client.batches] == [{"workers": "2"}, {}]
    assert mlflow_backend.client.batches[1]["tags"] == {"resumed_with.workers": "1"}


def test_only_finite_numbers_are_metrics():
    """MLflow's Metric and W&B's history take numbers: the record's time, step counters, ETA and timestamps are not
    metrics, nor a flag (True would log as 1.0), nor a value that is not finite."""
    fields = {"time": "2026-12-06T00:00:00Z", "step": 3, "steps": 10, "eta_s": 7, "logged_ms": 1, "loss": 2.5,
              "lr": 1e-4, "mfu": None, "stalled": True, "grad_norm": float("nan"), "val_loss": float("inf"), "tokens": 512}
    assert tracking._metrics(fields) == {"loss": 2.5, "lr": 1e-4, "tokens": 512.0}


def test_a_long_tag_value_is_cut_to_5000_characters():
    """MLflow keeps at most 8000 characters of a tag (MAX_TAG_VAL_LENGTH); the summary's long lists are cut first."""
    assert len(tracking._tag_text("x" * 9000)) == 5000
    assert tracking._tag_text({"a": [1, 2]}) == '{"a":[1,2]}'


class Server:
    """An MLflow server holding one run, run1, whose loss history has steps 3, 7 and 5."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.updated: list[tuple] = []

    def client(self, uri: str) -> "Server":
        return self

    def get_experiment_by_name(self, name):
        return types.SimpleNamespace(experiment_id="1")

    def create_run(self, experiment_id, run_name=None):
        self.created.append(run_name)
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id=f"new{len(self.created)}"))

    def get_run(self, run_id):
        return types.SimpleNamespace(data=types.SimpleNamespace(params={}))

    def update_run(self, run_id, status):
        self.updated.append((run_id, status))

    def get_metric_history(self, run_id, key):
        return [types.SimpleNamespace(step=s) for s in (3, 7, 5)] if key == "loss" else []


@pytest.fixture
def server(monkeypatch) -> Server:
    server = Server()
    monkeypatch.setitem(sys.modules, "mlflow", types.SimpleNamespace(MlflowClient=server.client,
                                                                     set_tracking_uri=lambda uri: None))
    return server


def stored_run(folder, uri: str = "http://mlflow:5000", experiment: str = "Default") -> str:
    tracking._store(str(folder), "mlflow", {"tracking_uri": uri, "experiment": experiment, "run_id": "run1"})
    return str(folder)


def test_a_reopened_mlflow_run_holds_steps_up_to_the_last_of_its_loss_history(tmp_path, server):
    """Steps arrive out of order after a resume (3, 7, then 5 retrained): the run holds steps up to 7, not 5 or 3;
    it is set RUNNING again (a failed attempt ended it FAILED)."""
    backend = tracking._Mlflow("http://mlflow:5000", None, "r")
    assert backend.open(stored_run(tmp_path)) == 7
    assert backend.run_id == "run1" and server.updated == [("run1", "RUNNING")] and server.created == []


def test_a_run_stored_under_another_tracking_server_is_not_reopened(tmp_path, server):
    """The run id belongs to the server that made it: a rerun pointed at another MLflow starts a run there."""
    backend = tracking._Mlflow("http://other-mlflow:5000", None, "r")
    assert backend.open(stored_run(tmp_path)) == 0
    assert backend.run_id == "new1" and server.created == ["r"]


def wandb_module(monkeypatch, resumed: bool, starting_step: int) -> list[dict]:
    inits: list[dict] = []
    run = types.SimpleNamespace(resumed=resumed, starting_step=starting_step)
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(
        init=lambda **kwargs: inits.append(kwargs) or run, Settings=lambda **kwargs: None))
    monkeypatch.delenv(tracking.WANDB_SECRET_ENV, raising=False)
    return inits


def test_a_wandb_rerun_under_another_entity_starts_a_run_of_its_own(tmp_path, monkeypatch):
    """W&B run ids are per entity and project: the id stored for team-a's run is not reused for team-b's."""
    inits = wandb_module(monkeypatch, resumed=False, starting_step=0)
    tracking._Wandb("demo", "team-a", "r", str(tmp_path)).open(str(tmp_path))
    tracking._Wandb("demo", "team-b", "r", str(tmp_path)).open(str(tmp_path))
    tracking._Wandb("demo", "team-b", "r", str(tmp_path)).open(str(tmp_path))
    ids = [init["id"] for init in inits]
    assert ids[0] != ids[1] and ids[1] == ids[2]


def test_a_new_wandb_run_holds_no_step(tmp_path, monkeypatch):
    """wandb.init on a new id: resumed is False and starting_step 0; nothing is held, so step 1 is sent."""
    wandb_module(monkeypatch, resumed=False, starting_step=0)
    assert tracking._Wandb("demo", None, "r", str(tmp_path)).open(str(tmp_path)) == 0


def test_a_wandb_run_on_s3_storage_writes_its_files_locally(monkeypatch):
    """wandb's dir is a local folder: a run stored on S3 leaves it to wandb (its default), a local run keeps them."""
    monkeypatch.delenv("WANDB_DIR", raising=False)
    assert tracking._Wandb("demo", None, "r", "s3://bucket/runs/r").folder is None
    assert tracking._Wandb("demo", None, "r", "/runs/r").folder == "/runs/r"


def test_a_failed_wandb_run_finishes_with_exit_code_1(monkeypatch):
    finished = []
    backend = tracking._Wandb("demo", None, "r", "/runs/r")
    backend.run = types.SimpleNamespace(summary={}, finish=lambda exit_code: finished.append(exit_code))
    backend.send([("end", ("FAILED", {"export": "s3://b/x"}))])
    backend.send([("end", ("FINISHED", {}))])
    assert finished == [1, 0] and backend.run.summary == {"export": "s3://b/x"}


def test_an_api_key_in_the_environment_wins_over_the_secret(monkeypatch):
    monkeypatch.setenv(tracking.WANDB_SECRET_ENV, "wandb-key")
    monkeypatch.setenv("WANDB_API_KEY", "from-env")
    monkeypatch.setitem(sys.modules, "boto3", None)  # reading the secret would fail here
    tracking._api_key_from_secret()
    assert tracking.os.environ["WANDB_API_KEY"] == "from-env"


def test_the_secrets_api_key_is_read_without_its_trailing_newline(monkeypatch):
    monkeypatch.setenv(tracking.WANDB_SECRET_ENV, "wandb-key")
    monkeypatch.setenv("WANDB_API_KEY", "")  # unset for the trainer (empty), restored after the test
    client = types.SimpleNamespace(get_secret_value=lambda SecretId: {"SecretString": f"key-of-{SecretId}\n"})
    monkeypatch.setitem(sys.modules, "boto3", types.SimpleNamespace(client=lambda service: client))
    tracking._api_key_from_secret()
    assert tracking.os.environ["WANDB_API_KEY"] == "key-of-wandb-key"


def test_the_summary_leaves_out_figures_not_known_yet_and_those_of_the_step_line(monkeypatch):
    """A CPU run has no MFU (None): MLflow would show the tag 'None'. The step line's loss is a metric already."""
    backend = Backend()
    tracker = tracking._Sender(backend, "runs/r", {}, {}, print)
    tracker.step({"step": 3, "loss": 2.0})
    tracker.summary({"step": 3, "loss": 2.0, "mfu": None, "transport": "gloo (CPU): no NCCL"})
    tracker.close()
    assert [value for kind, value in backend.sent if kind == "summary"] == [{"step": 3, "transport": "gloo (CPU): no NCCL"}]


def test_the_end_of_an_exported_run_names_where_the_model_went():
    backend = Backend()
    tracking._Sender(backend, "runs/r", {}, {}, print).close(exported="s3://bucket/runs/r/hf-export")
    assert backend.sent[-1] == ("end", ("FINISHED", {"export": "s3://bucket/runs/r/hf-export"}))


def test_an_experiment_another_run_created_meanwhile_is_used(tmp_path, monkeypatch):
    """Two runs start into a new experiment: the second's create fails (RESOURCE_ALREADY_EXISTS) and it logs into
    the experiment the first created, instead of the tracker failing for the whole run."""
    class Racing(Server):
        def __init__(self) -> None:
            super().__init__()
            self.looked_up = 0

        def get_experiment_by_name(self, name):
            self.looked_up += 1
            return None if self.looked_up == 1 else types.SimpleNamespace(experiment_id="9")

        def create_experiment(self, name):
            raise RuntimeError("RESOURCE_ALREADY_EXISTS")

        def create_run(self, experiment_id, run_name=None):
            assert experiment_id == "9"
            return super().create_run(experiment_id, run_name)

    racing = Racing()
    monkeypatch.setitem(sys.modules, "mlflow", types.SimpleNamespace(MlflowClient=racing.client,
                                                                     set_tracking_uri=lambda uri: None))
    monkeypatch.setitem(sys.modules, "mlflow.exceptions", types.SimpleNamespace(MlflowException=RuntimeError))
    backend = tracking._Mlflow("http://mlflow:5000", "new-team", "r")
    assert backend.open(str(tmp_path)) == 0 and backend.run_id == "new1"


def test_mlflow_gives_up_on_a_dead_server_in_seconds_unless_the_user_set_its_limits(tmp_path, server, monkeypatch):
    """MLflow's defaults (7 retries with backoff, 120 s a request) hold the tracker thread for minutes before it
    counts the server as failed; the thread retries by itself. A value the user set is kept."""
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "5")
    tracking._Mlflow("http://mlflow:5000", None, "r").open(stored_run(tmp_path))
    assert (tracking.os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], tracking.os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) == ("5", "30")
