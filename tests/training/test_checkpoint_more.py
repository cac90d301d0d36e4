"""More of training.checkpoint's contract: poll() never waits on a save still in flight, a stop save that fails says
so at once, retiring removes a partial save of the newest committed step, and URIs keep one slash."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from training import checkpoint as ckpt
from training.storage import COMMIT_PROTOCOL, TRAIN_STATE

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # DCP saves alone, in one process


def _linear():
    import torch

    model = torch.nn.Linear(2, 2)
    return model, torch.optim.AdamW(model.parameters())


def _refused(local: str, uri: str) -> None:
    raise PermissionError(f"AccessDenied: PutObject on {uri}")


def test_poll_returns_at_once_past_a_save_still_in_flight_and_forgets_only_the_finished_one(tmp_path):
    """poll() runs after every step: a save still uploading must not stall the step (an async checkpoint would then
    cost its whole upload, and a long one trips the hang watchdog). A finished save is forgotten; the one in flight
    is kept for the next poll."""
    saves = ckpt.Checkpoints(False, 0, 1, str(tmp_path / "run"), "a", print)
    finished, in_flight = Future(), Future()
    finished.set_result(None)
    saves.shipments = [ckpt.Shipment(10, "u10", finished), ckpt.Shipment(20, "u20", in_flight)]
    polling = threading.Thread(target=saves.poll, daemon=True)
    polling.start()
    polling.join(5)
    blocked = polling.is_alive()
    in_flight.set_result(None)  # lets a blocked poll end
    assert not blocked
    assert [s.step for s in saves.shipments] == [20]


def test_a_stop_save_whose_upload_is_refused_raises_from_the_save_itself(tmp_path):
    """wait=True is the stop's save (the preStop hook waits for it): its failure must surface there, not at a poll
    that never comes."""
    saves = ckpt.Checkpoints(False, 0, 1, str(tmp_path / "run"), "a", print, upload=_refused)
    with pytest.raises(ckpt.CheckpointFailed, match=r"^checkpoint of step 10: PermissionError: AccessDenied"):
        saves.save(*_linear(), step=10, data_position=10, wait=True)


def test_the_stopping_line_names_the_save_that_failed_beside_what_is_committed(tmp_path, capsys):
    saves = ckpt.Checkpoints(False, 0, 1, str(tmp_path / "run"), "a", print, upload=_refused)
    saves.save(*_linear(), step=10, data_position=10)
    line = saves.finish(timeout_s=30)
    assert line.startswith("no checkpoint is committed: a retry or a rerun starts from step 0 (checkpoint of step 10: "
                           "PermissionError: AccessDenied")
    assert saves.shipments == []


def test_a_run_uri_with_a_trailing_slash_names_checkpoints_with_one_slash(tmp_path):
    """s3://bucket/run/ and s3://bucket/run are the same run: a doubled slash is another S3 key, which no resume
    (scan_checkpoints lists run/checkpoint_*) would ever find."""
    run = f"{tmp_path}/run"
    saves = ckpt.Checkpoints(False, 0, 1, run + "/", "a", print)
    saves.save(*_linear(), step=10, data_position=10, wait=True)
    assert [s.uri for s in saves.shipments] == [f"{run}/checkpoint_00000010_a"]
    assert ckpt.resume_choice(run)[0] == f"{run}/checkpoint_00000010_a"


def _partial(folder: Path, step: int) -> None:
    """A save cut off after rank 0's train state: its shards never came."""
    folder.mkdir(parents=True)
    (folder / TRAIN_STATE).write_text(f'{{"step": {step}, "data_position": {step}, "world": 1, '
                                      f'"protocol": "{COMMIT_PROTOCOL}"}}')


def _committed(run: Path, step: int, attempt: str = "a") -> str:
    uri = f"{run}/{ckpt.checkpoint_folder_name(step, attempt)}"
    ckpt.save(uri, *_linear(), step=step, data_position=step, rank=0, world=1)
    ckpt.commit(uri, world=1)
    return uri


@pytest.mark.parametrize("partial_step, removed", [(20, True), (21, False)])
def test_retiring_removes_a_partial_save_of_the_newest_committed_step_and_keeps_a_later_one(tmp_path, partial_step, removed):
    """Step 20 committed by attempt b; attempt a's save of step 20 was cut off: no resume can use it (step 20 is
    whole elsewhere). A partial save of step 21 may still be arriving and stays."""
    run = tmp_path / "run"
    _committed(run, 20, attempt="b")
    partial = run / ckpt.checkpoint_folder_name(partial_step, "a")
    _partial(partial, partial_step)
    gone = ckpt.retire(str(run))
    assert gone == ([str(partial)] if removed else [])
    assert partial.exists() is not removed


def test_each_commit_retires_the_runs_older_checkpoints_and_each_save_records_its_stall(tmp_path):
    """Three saves through the run's Checkpoints: after the third commit only the newest KEEP (2) are left in the
    run's folder, so storage does not grow a checkpoint per save; the summary gets one stall per save."""
    run = tmp_path / "run"
    saves = ckpt.Checkpoints(False, 0, 1, str(run), "a", print)
    model, optimizer = _linear()
    for step in (10, 20, 30):
        saves.save(model, optimizer, step=step, data_position=step, wait=True)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint_00000020_a", "checkpoint_00000030_a"]
    assert len(saves.stalls) == 3


class _RecordingSaver:
    """AsyncSaver's surface: a background write still pending; records the order of finish() and start()."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.pending = object()  # the previous checkpoint's write, not finished

    def finish(self):
        self.calls.append("finish")
        self.pending = None

    def start(self, *args):
        self.calls.append("start")
        written: Future = Future()
        written.set_result(None)
        return type("Started", (), {"future": written})()


def test_a_background_save_finishes_the_previous_background_write_before_it_starts(tmp_path):
    """DCP writes one checkpoint at a time (AsyncSaver.start asserts it): a periodic, unwaited save that comes while
    the last one is still writing waits for that write first, as a waited save does."""
    saves = ckpt.Checkpoints(False, 1, 2, str(tmp_path / "run"), "a", print, upload=lambda local, uri: None)
    saves.saver = _RecordingSaver()  # a real AsyncSaver needs a process group for its gloo writes
    model, optimizer = _linear()
    saves.save(model, optimizer, 4, 0, wait=False)
    assert saves.saver.calls == ["finish", "start"]
