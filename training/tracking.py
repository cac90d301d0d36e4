"""The run in an experiment tracker: MLflow (SageMaker's managed MLflow included) or Weights & Biases.

Rank 0 alone talks to the tracker, from a background thread: the training step only appends to a queue,
so a slow, unreachable or refusing tracker never holds a step up. Its first failure prints one warning;
the thread retries every RETRY_S, and the run's own record (metrics.jsonl) stays complete either way.

Resume: the tracking run's id is stored in the run folder (TRACKING_FILE, beside the checkpoints), so a
worker-group restart, a job retry or a rerun under the same run name continues the same tracking run.
A resumed run retrains the steps after its checkpoint; steps the tracker already holds are not sent
again (MLflow would keep both values of a step, W&B refuses a step below its last), so each step is
logged once, with the value first logged for it (the same loss for an exact resume); the steps up to the
checkpoint that a killed rank 0 had not sent are sent from metrics.jsonl by the next one.
"""

from __future__ import annotations

import collections
import importlib.util
import itertools
import json
import math
import os
import re
import threading
import time
import uuid

TRACKERS = ("none", "mlflow", "wandb")
TRACKING_FILE = "tracking.json"
RETRY_S = 60.0
"""After a failure, the tracker is tried again this often (never from the training step)."""
CLOSE_TIMEOUT_S = 30.0
"""At the end, a healthy but slow tracker is waited for this long; a failing one is not waited for."""
MAX_PENDING = 100_000
"""Records kept for a tracker that is down; past this, the oldest are dropped (and counted)."""
BATCH = 50
"""Records per send: one MLflow log-batch call (50 steps of about 12 metrics are within its 1000)."""
SEND_EVERY_S = 2.0
"""Sends are this far apart unless a backlog waits (and for the last): fast steps go out together, not a request each."""

# Exact pins, the same as requirements-train.txt (tests/training/test_tracking.py): what a pod installs
# through the Ray runtime env when its image lacks the package (runtime_env).
PACKAGES = {"mlflow": "mlflow-skinny==3.17.2", "sagemaker_mlflow": "sagemaker-mlflow==0.5.0", "wandb": "wandb==0.31.0"}

# A SageMaker managed MLflow tracking server or MLflow App; the sagemaker-mlflow plugin serves the partitions
# aws and aws-us-gov only (mlflow_sagemaker_helpers.py _get_dns_suffix).
SAGEMAKER_MLFLOW_ARN = re.compile(r"arn:(aws|aws-us-gov):sagemaker:([a-z0-9-]+):(\d{12}):"
                                  r"(mlflow-tracking-server|mlflow-app)/([A-Za-z0-9][A-Za-z0-9-]{0,255})")
HTTP_URI = re.compile(r"https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[A-Za-z0-9._~/-]*)?")

# The REST calls this module makes through MlflowClient, by path, and the operation each is (the IAM action
# sagemaker-mlflow:<operation> on a tracking server). tests/training/test_train_ray.py reads the loopback
# server's access log and fails on a call missing here; tools/seams judges each against the pods' role.
MLFLOW_OPERATIONS = {
    "/api/2.0/mlflow/experiments/get-by-name": "GetExperimentByName",
    "/api/2.0/mlflow/experiments/create": "CreateExperiment",
    "/api/2.0/mlflow/runs/create": "CreateRun",
    "/api/2.0/mlflow/runs/get": "GetRun",
    "/api/2.0/mlflow/metrics/get-history": "GetMetricHistory",
    "/api/2.0/mlflow/runs/log-batch": "LogBatch",
    "/api/2.0/mlflow/runs/update": "UpdateRun",
}
# Where the W&B API key's Secrets Manager secret (a name or ARN) is given to the pods; read once by rank 0.
WANDB_SECRET_ENV = "WANDB_API_KEY_SECRET"
# Fields of a step record that are not metrics.
_NOT_METRICS = ("time", "step", "steps", "eta_s", "logged_ms")
# MLflow's limits per log-batch call (mlflow.utils.validation): 100 params, 100 tags, 1000 entities in all.
_BATCH_METRICS, _BATCH_PARAMS_TAGS = 800, 100
# MLflow keeps at most 8000 characters of a tag's value (MAX_TAG_VAL_LENGTH); longer summaries are cut.
_TAG_CHARS = 5000


# SageMaker's pattern for an MLflow experiment name (AIMlflowConfig.MlflowExperimentName); W&B's names refuse
# / \ # ? % : and hold at most 128 characters, and these reach a shell command line (the RayJob's entrypoint).
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9\-_./]{1,256}")
WANDB_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
_MLFLOW_OPTIONS = ("mlflow_tracking_uri", "mlflow_experiment")
_WANDB_OPTIONS = ("wandb_project", "wandb_entity")


def is_sagemaker_arn(uri: str | None) -> bool:
    return bool(uri) and SAGEMAKER_MLFLOW_ARN.fullmatch(uri) is not None


def option_problem(c) -> str | None:
    """The first tracking option the trainer cannot use, as one line naming it (training.config_rules.validate), or None."""
    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    if c.tracking not in TRACKERS:
        return f"--tracking: {c.tracking!r} must be one of {', '.join(TRACKERS)}"
    if c.tracking == "mlflow" and not c.mlflow_tracking_uri:
        return "--tracking: mlflow needs --mlflow-tracking-uri (http(s)://host[:port] or a SageMaker managed MLflow ARN)"
    for tracker, options in (("mlflow", _MLFLOW_OPTIONS), ("wandb", _WANDB_OPTIONS)):
        given = [name for name in options if getattr(c, name) is not None]
        if given and c.tracking != tracker:
            return f"{flag(given[0])}: only used with --tracking {tracker} (this run's --tracking is {c.tracking})"
    uri = c.mlflow_tracking_uri
    if uri is not None and HTTP_URI.fullmatch(uri) is None and not is_sagemaker_arn(uri):
        return (f"--mlflow-tracking-uri: {uri!r} must be http(s)://host[:port][/path] or a SageMaker managed MLflow ARN, "
                "arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name> or .../mlflow-app/<id> (partitions "
                "aws and aws-us-gov, the sagemaker-mlflow plugin's)")
    if c.mlflow_experiment is not None and EXPERIMENT_NAME.fullmatch(c.mlflow_experiment) is None:
        return f"--mlflow-experiment: {c.mlflow_experiment!r} must be 1 to 256 letters, digits, '-', '_', '.' or '/'"
    for name in _WANDB_OPTIONS:
        value = getattr(c, name)
        if value is not None and WANDB_NAME.fullmatch(value) is None:
            return f"{flag(name)}: {value!r} must be 1 to 128 letters, digits, '.', '_' or '-'"
    return None


def needed_packages(cfg) -> dict[str, str]:
    """module -> pinned distribution, for what the run's tracker imports."""
    modules = {"none": [], "wandb": ["wandb"], "mlflow": ["mlflow"]}[cfg.tracking]
    if cfg.tracking == "mlflow" and is_sagemaker_arn(cfg.mlflow_tracking_uri):
        modules.append("sagemaker_mlflow")
    return {m: PACKAGES[m] for m in modules}


def runtime_env(cfg) -> dict:
    """The training workers' runtime env: pip packages for the tracker where this Python lacks them (the cluster
    image has neither MLflow nor W&B; every pod runs the driver's image). Ray installs them once per node, in a
    copy of the image's virtualenv (README, "Experiment tracking"); nothing where they are importable."""
    missing = [pin for module, pin in needed_packages(cfg).items() if importlib.util.find_spec(module) is None]
    return {"pip": {"packages": missing, "pip_check": False}} if missing else {}


class Tracker:
    """No tracker (another rank, or --tracking none): every call does nothing."""

    def step(self, fields: dict) -> None:
        """A logged step's record (StepStats.fields)."""

    def summary(self, figures: dict) -> None:
        """The figures reported with a checkpoint: the run summary so far."""

    def close(self, failed: bool = False, exported: str | None = None) -> None:
        """The run ended (failed: stopped by an error; a retry reopens it). exported: where the model went."""


def start(cfg, run_uri: str, rank: int, resumed_from: int, health: str | None, earlier: list[dict] = (),
          log=print) -> Tracker:
    """Rank 0's tracker for the run (connecting in the background), or one that does nothing. health: the health
    gate's line. earlier: a resumed run's step records up to its checkpoint (metrics.jsonl), sent where the tracker
    lacks them: a rank 0 that died takes what it had not sent yet with it."""
    if rank != 0 or cfg.tracking == "none":
        return Tracker()
    import dataclasses

    backend = (_Mlflow(cfg.mlflow_tracking_uri, cfg.mlflow_experiment, cfg.run_name) if cfg.tracking == "mlflow"
               else _Wandb(cfg.wandb_project, cfg.wandb_entity, cfg.run_name, run_uri))
    tags = {"run_uri": run_uri}
    if health:
        tags["health"] = health
    if resumed_from:
        tags["resumed_from_step"] = str(resumed_from)
    sender = _Sender(backend, run_uri, dataclasses.asdict(cfg), tags, log)
    for record in earlier:  # logged at their own time
        sender._put(("step", dict(record, logged_ms=_milliseconds(record.get("time")))))
    return sender


class _Sender(Tracker):
    """Queues what rank 0 logs; a daemon thread opens the tracking run and sends the queue in batches."""

    def __init__(self, backend, run_uri: str, params: dict, tags: dict, log) -> None:
        self.backend, self.run_uri, self.log = backend, run_uri, log
        self._pending: collections.deque = collections.deque([("params", params), ("tags", tags)])
        self._changed = threading.Condition()
        self._closing = self._opened = self._done = False
        self._failing: str | None = None
        self._warned = False
        self._dropped = self._logged_to = 0
        self._step_fields: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="tracking", daemon=True)
        self._thread.start()

    def step(self, fields: dict) -> None:
        self._step_fields.update(fields)
        self._put(("step", dict(fields, logged_ms=int(time.time() * 1000))))

    def summary(self, figures: dict) -> None:
        """The run's figures, less those of its last step line (the tracker has them as metrics)."""
        self._put(("summary", {k: v for k, v in figures.items()
                               if v is not None and (k == "step" or k not in self._step_fields)}))

    def close(self, failed: bool = False, exported: str | None = None) -> None:
        if self._closing:
            return
        tags = {"export": exported} if exported else {}
        self._put(("end", ("FAILED" if failed else "FINISHED", tags)), closing=True)
        self._thread.join(timeout=1.0 if self._failing else CLOSE_TIMEOUT_S)
        if not self._done:
            why = f" ({self._failing})" if self._failing else f" (still sending after {CLOSE_TIMEOUT_S:g} s)"
            self.log(f"tracking: {len(self._pending) + self._dropped} record(s) not sent to {self.backend.where}{why}; "
                     f"the run's own record is {self.run_uri}/metrics.jsonl")

    def _put(self, item: tuple, closing: bool = False) -> None:
        with self._changed:
            if len(self._pending) == MAX_PENDING:
                self._pending.popleft()
                self._dropped += 1
            self._pending.append(item)
            self._closing = self._closing or closing
            self._changed.notify()

    def _loop(self) -> None:
        while True:
            with self._changed:
                while not self._pending:
                    self._changed.wait()
                batch = list(itertools.islice(self._pending, BATCH))
            try:
                if not self._opened:
                    self._logged_to = self.backend.open(self.run_uri)
                    self._opened = True
                # A resumed run's steps up to the last one the tracker holds were logged before the restart.
                self.backend.send([item for item in batch if item[0] != "step" or item[1]["step"] > self._logged_to])
            except Exception as error:  # anything the tracker or its client raises: training goes on
                self._failed(error)
                if self._closing:
                    return
                self._pause(RETRY_S)
                continue
            self._failing = None
            with self._changed:
                for item in batch:  # by identity: a full queue may have dropped its oldest meanwhile
                    if self._pending and self._pending[0] is item:
                        self._pending.popleft()
            if batch[-1][0] == "end":
                self._done = True
                return
            if len(self._pending) < BATCH:  # a backlog (a tracker back after an outage) goes out at once
                self._pause(SEND_EVERY_S)

    def _pause(self, seconds: float) -> None:
        """Wait this long, or until the run closes (a logged step does not end the wait)."""
        deadline = time.monotonic() + seconds
        with self._changed:
            while not self._closing and time.monotonic() < deadline:
                self._changed.wait(deadline - time.monotonic())

    def _failed(self, error: Exception) -> None:
        first_line = (str(error).strip().splitlines() or [""])[0][:200]
        self._failing = f"{type(error).__name__}: {first_line}"
        if not self._warned:
            self._warned = True
            self.log(f"tracking: {self.backend.where} failed ({self._failing}); training goes on without it, "
                     f"retrying every {RETRY_S:g} s (the run's own record: {self.run_uri}/metrics.jsonl)")


def _milliseconds(utc: str | None) -> int:
    """A step record's time (UTC, ISO 8601 to the second), or now, in milliseconds since the epoch."""
    import calendar

    return calendar.timegm(time.strptime(utc, "%Y-%m-%dT%H:%M:%SZ")) * 1000 if utc else int(time.time() * 1000)


def _metrics(fields: dict) -> dict[str, float]:
    return {k: float(v) for k, v in fields.items() if k not in _NOT_METRICS and isinstance(v, (int, float))
            and not isinstance(v, bool) and math.isfinite(v)}


def _tag_text(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return text[:_TAG_CHARS]


def _read_stored(run_uri: str) -> dict:
    from training.storage import exists, read_text

    uri = f"{run_uri}/{TRACKING_FILE}"
    return json.loads(read_text(uri)) if exists(uri) else {}


def _store(run_uri: str, key: str, ident: dict) -> None:
    from training.storage import write_text

    write_text(f"{run_uri}/{TRACKING_FILE}", json.dumps(_read_stored(run_uri) | {key: ident}, indent=1))


class _Mlflow:
    """MLflow's REST API through MlflowClient: http(s) servers, and SageMaker's through the sagemaker-mlflow plugin."""

    def __init__(self, uri: str, experiment: str | None, run_name: str) -> None:
        self.uri, self.experiment, self.run_name = uri, experiment or "Default", run_name
        self.where = f"mlflow at {uri}"
        self.run_id = None
        self.existing_params: dict[str, str] = {}

    def open(self, run_uri: str) -> int:
        """Opens (or reopens) the tracking run; returns the last step it holds."""
        import logging

        # MLflow retries a request 7 times with exponential backoff and waits up to 120 s for an answer by default:
        # minutes before a dead server counts as failed. The thread retries on its own (RETRY_S).
        for name, value in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2"), ("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")):
            os.environ.setdefault(name, value)
        if not is_sagemaker_arn(self.uri):
            # The sagemaker-mlflow plugin's header provider parses any tracking URI as an ARN and warns on every
            # request to another server (mlflow_sagemaker_request_header_provider.py); nothing else logs there.
            logging.getLogger("mlflow.tracking.request_header.registry").setLevel(logging.ERROR)
        import mlflow
        from mlflow import MlflowClient

        # The plugin signs each request for the ARN of the process's tracking URI, not the client's.
        mlflow.set_tracking_uri(self.uri)
        self.client = MlflowClient(self.uri)
        stored = _read_stored(run_uri).get("mlflow", {})
        if stored.get("tracking_uri") == self.uri and stored.get("experiment") == self.experiment:
            self.run_id = stored["run_id"]
            run = self.client.get_run(self.run_id)
            self.existing_params = dict(run.data.params)
            self.client.update_run(self.run_id, "RUNNING")
            return max((m.step for m in self.client.get_metric_history(self.run_id, "loss")), default=0)
        found = self.client.get_experiment_by_name(self.experiment)
        experiment_id = found.experiment_id if found else self._create_experiment()
        self.run_id = self.client.create_run(experiment_id, run_name=self.run_name).info.run_id
        _store(run_uri, "mlflow", {"tracking_uri": self.uri, "experiment": self.experiment, "run_id": self.run_id})
        return 0

    def _create_experiment(self) -> str:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.create_experiment(self.experiment)
        except MlflowException:  # another run created it meanwhile
            return self.client.get_experiment_by_name(self.experiment).experiment_id

    def send(self, batch: list[tuple]) -> None:
        from mlflow.entities import Metric, Param, RunTag

        metrics, new_params, tags, end = [], {}, {}, None
        for kind, value in batch:
            if kind == "step":
                metrics += [Metric(k, v, value["logged_ms"], value["step"]) for k, v in _metrics(value).items()]
            elif kind == "params":
                # MLflow refuses a changed param: a resumed run's other values (e.g. --workers) become tags.
                for k, v in value.items():
                    if k not in self.existing_params:
                        new_params[k] = _tag_text(v)
                    elif self.existing_params[k] != _tag_text(v):
                        tags[f"resumed_with.{k}"] = _tag_text(v)
            elif kind == "tags":
                tags |= {k: _tag_text(v) for k, v in value.items()}
            elif kind == "summary":
                tags |= {f"summary.{k}": _tag_text(v) for k, v in value.items()}
            elif kind == "end":
                end, ended_tags = value
                tags |= ended_tags
        params, tag_list = [Param(k, v) for k, v in new_params.items()], [RunTag(k, v) for k, v in tags.items()]
        while metrics or params or tag_list:
            self.client.log_batch(self.run_id, metrics=metrics[:_BATCH_METRICS], params=params[:_BATCH_PARAMS_TAGS],
                                  tags=tag_list[:_BATCH_PARAMS_TAGS])
            metrics, params, tag_list = metrics[_BATCH_METRICS:], params[_BATCH_PARAMS_TAGS:], tag_list[_BATCH_PARAMS_TAGS:]
        self.existing_params |= new_params
        if end:
            self.client.set_terminated(self.run_id, end)


class _Wandb:
    """A W&B run through the wandb SDK (online with WANDB_API_KEY, or WANDB_MODE=offline files)."""

    def __init__(self, project: str | None, entity: str | None, run_name: str, run_uri: str) -> None:
        self.project, self.entity, self.run_name = project, entity, run_name
        self.where = f"wandb project {project or '(default)'}"
        self.folder = os.environ.get("WANDB_DIR") or (run_uri if "://" not in run_uri else None)
        self.run = None

    def open(self, run_uri: str) -> int:
        import wandb

        _api_key_from_secret()
        stored = _read_stored(run_uri).get("wandb", {})
        same = stored.get("project") == self.project and stored.get("entity") == self.entity
        run_id = stored["id"] if same and stored.get("id") else uuid.uuid4().hex[:12]
        if not same or not stored.get("id"):
            _store(run_uri, "wandb", {"project": self.project, "entity": self.entity, "id": run_id})
        self.run = wandb.init(project=self.project, entity=self.entity, name=self.run_name, id=run_id, resume="allow",
                              dir=self.folder, settings=wandb.Settings(console="off"))
        return self.run.starting_step - 1 if self.run.resumed else 0

    def send(self, batch: list[tuple]) -> None:
        for kind, value in batch:
            if kind == "step":
                self.run.log(_metrics(value), step=value["step"])
            elif kind == "params":
                self.run.config.update(value, allow_val_change=True)
            elif kind in ("tags", "summary"):
                self.run.summary.update(value)
            elif kind == "end":
                status, tags = value
                self.run.summary.update(tags)
                self.run.finish(exit_code=0 if status == "FINISHED" else 1)


def _api_key_from_secret() -> None:
    """WANDB_API_KEY from the Secrets Manager secret the pods name (WANDB_SECRET_ENV), through the pod's role;
    the key never passes through the template or the command line. A key already in the environment wins."""
    secret = os.environ.get(WANDB_SECRET_ENV)
    if not secret or os.environ.get("WANDB_API_KEY"):
        return
    import boto3

    os.environ["WANDB_API_KEY"] = boto3.client("secretsmanager").get_secret_value(SecretId=secret)["SecretString"].strip()
