"""The trainer's machine-readable record of a logged step: one JSON object per line.

Written to the job's log behind a prefix (what `make watch` follows) and to metrics.jsonl beside the
checkpoints. No torch here: the deploy tools read these records too.
"""

from __future__ import annotations

import json

RECORD_PREFIX = "eks-fsdp-efa.step "


def format_record(fields: dict) -> str:
    return RECORD_PREFIX + json.dumps(fields, separators=(",", ":"))


def parse_record(line: str) -> dict | None:
    """The record a log line carries, or None (another line, or one cut short)."""
    at = line.find(RECORD_PREFIX)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(RECORD_PREFIX):])
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and "step" in record else None


METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


class RecordWriter:
    """The run's metrics.jsonl (and TensorBoard events, where a writer is importable) in the
    storage path, kept current as the run goes.

    Rank 0 hands over each record; a background thread rewrites the file (S3 objects cannot be
    appended to) at most every interval_s, so a slow bucket never holds up a step. flush() writes
    now and waits: at checkpoints and at the end.
    """

    def __init__(self, run_uri: str, records: list[dict], interval_s: float = 10.0) -> None:
        import threading

        self.run_uri, self.interval_s = run_uri, interval_s
        self.records = list(records)
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._events = _tensorboard(run_uri)
        self._thread = threading.Thread(target=self._loop, name="metrics-writer", daemon=True)
        self._thread.start()

    def add(self, record: dict) -> None:
        with self._lock:
            self.records.append(record)
        if self._events:
            self._events.add(record)
        self._dirty.set()

    def flush(self) -> None:
        with self._lock:
            snapshot = list(self.records)
        self._write(snapshot)

    def close(self) -> None:
        self._stop.set()
        self._dirty.set()
        self._thread.join()
        self.flush()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            self._dirty.clear()
            if self._stop.is_set():
                return
            try:
                self.flush()
            except OSError as error:  # a bucket hiccup: the next write or flush() retries
                print(f"metrics: could not write {self.run_uri}/{METRICS_FILE}: {error}", flush=True)
            self._stop.wait(self.interval_s)

    def _write(self, snapshot: list[dict]) -> None:
        from training.storage import write_text

        write_text(f"{self.run_uri}/{METRICS_FILE}", "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in snapshot))
        if self._events:
            self._events.sync()


def read_metrics(text: str, up_to_step: int | None = None) -> list[dict]:
    """The records of a metrics.jsonl, without steps past up_to_step (a resumed run's checkpoint)."""
    kept = []
    for line in text.splitlines():
        record = parse_record(RECORD_PREFIX + line)
        if record and (up_to_step is None or record["step"] <= up_to_step):
            kept.append(record)
    return kept


# Scalars a TensorBoard user looks for, by record field.
TENSORBOARD_SCALARS = {"loss": "loss/train", "val_loss": "loss/validation", "val_ppl": "perplexity/validation",
                       "lr": "optimizer/lr", "grad_norm": "optimizer/grad_norm",
                       "tokens_per_s_per_gpu": "throughput/tokens_per_s_per_gpu", "mfu": "throughput/mfu",
                       "peak_mem_gib": "memory/peak_gib"}


class _EventFiles:
    """TensorBoard event files under <run>/tensorboard; written locally, copied when the run is remote."""

    def __init__(self, writer_class, run_uri: str) -> None:
        import tempfile

        self.target = f"{run_uri}/{TENSORBOARD_DIR}"
        self.local = self.target if "://" not in run_uri else tempfile.mkdtemp(prefix="tensorboard-")
        self.writer = writer_class(self.local)

    def add(self, record: dict) -> None:
        for field, tag in TENSORBOARD_SCALARS.items():
            if record.get(field) is not None:
                self.writer.add_scalar(tag, record[field], record["step"])

    def sync(self) -> None:
        self.writer.flush()
        if self.local != self.target:
            from training.storage import upload_folder

            upload_folder(self.local, self.target)


def _tensorboard(run_uri: str) -> _EventFiles | None:
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            return None
    return _EventFiles(SummaryWriter, run_uri)
