"""Checkpoints count once committed (training.checkpoint, training.storage): the commit marker is written last,
after every rank's files are in storage; a checkpoint without it is passed over at the next start, named with
what it lacks; retiring keeps the newest two. Hand-built folders, so each file's presence is known."""

from __future__ import annotations

import json
import pickle
import threading
import time
from pathlib import Path

import pytest

from training import checkpoint as ckpt
from training.storage import COMMIT, COMMIT_PROTOCOL, complete_checkpoints, filesystem, missing_files, scan_checkpoints


def _metadata(names: list[str]) -> bytes:
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex

    return pickle.dumps(Metadata(state_dict_metadata={}, storage_data={
        MetadataIndex(f"item{i}"): _StorageInfo(name, 0, 64) for i, name in enumerate(names)}))


def _write(folder: Path, step: int, without: tuple[str, ...] = (), committed: bool = True, protocol: bool = True) -> Path:
    """A two-rank checkpoint: each rank's 64-byte shard and random state, rank 0's metadata and train state."""
    state = {"step": step, "data_position": step} | ({"world": 2, "protocol": COMMIT_PROTOCOL} if protocol else {})
    files = {".metadata": _metadata(["__0_0.distcp", "__1_0.distcp"]), "__0_0.distcp": bytes(64),
             "__1_0.distcp": bytes(64), "rng-rank0.pt": b"r0", "rng-rank1.pt": b"r1",
             "train_state.json": json.dumps(state).encode()}
    if committed and protocol:
        files[COMMIT] = b"{}"
    folder.mkdir(parents=True)
    for name, data in files.items():
        if name not in without:
            (folder / name).write_bytes(data)
    return folder


def test_a_committed_checkpoint_is_complete(tmp_path):
    _write(tmp_path / "run" / "checkpoint_00000010_a", 10)
    assert complete_checkpoints(str(tmp_path / "run")) == [(10, f"{tmp_path}/run/checkpoint_00000010_a")]


def test_every_file_there_but_no_commit_marker_is_a_save_cut_off(tmp_path):
    """Both ranks uploaded; the stop came before rank 0 wrote the marker: nothing proves the files are the save's
    whole, so it is passed over, and the line says so."""
    _write(tmp_path / "run" / "checkpoint_00000010_a", 10, committed=False)
    [found] = scan_checkpoints(str(tmp_path / "run"))
    assert (found.complete, found.step) == (False, 10)
    assert found.why == "no commit marker: every file is there, but the save stopped before its commit"


@pytest.mark.parametrize("lost, why", [
    ("__1_0.distcp", "no commit marker: __1_0.distcp missing"),
    ("rng-rank1.pt", "no commit marker: rng-rank1.pt missing (rank 1's random state)"),
    (".metadata", "no commit marker: no .metadata (DCP's index, written by rank 0)"),
])
def test_a_partial_save_is_named_with_what_it_lacks(tmp_path, lost, why):
    _write(tmp_path / "run" / "checkpoint_00000010_a", 10, without=(lost,), committed=False)
    [found] = scan_checkpoints(str(tmp_path / "run"))
    assert not found.complete and found.why == why


def test_a_marker_does_not_cover_a_file_lost_since(tmp_path):
    _write(tmp_path / "run" / "checkpoint_00000010_a", 10, without=("__1_0.distcp",))
    [found] = scan_checkpoints(str(tmp_path / "run"))
    assert not found.complete and found.why == "committed, but __1_0.distcp missing since"


def test_a_checkpoint_written_before_commit_markers_still_resumes_when_whole(tmp_path):
    """Checkpoints of the trainer before the commit protocol have no marker and no world size: every rank's
    shards, verified against DCP's metadata, are enough (what storage.checkpoint_complete required then)."""
    _write(tmp_path / "run" / "checkpoint_2026-12-01_10-00-00.000000", 10, protocol=False)
    _write(tmp_path / "run" / "checkpoint_2026-12-01_10-05-00.000000", 20, protocol=False, without=("__1_0.distcp",))
    found = scan_checkpoints(str(tmp_path / "run"))
    assert [(f.step, f.complete, f.why) for f in found] == [
        (10, True, "written before commit markers; every rank's shards verified"), (20, False, "__1_0.distcp missing")]


def test_the_resume_takes_the_newest_committed_and_names_the_newer_partial_one(tmp_path):
    run = tmp_path / "run"
    _write(run / "checkpoint_00000010_a", 10)
    _write(run / "checkpoint_00000020_a", 20, without=("__1_0.distcp",), committed=False)
    chosen, lines = ckpt.resume_choice(str(run))
    assert chosen == f"{run}/checkpoint_00000010_a"
    assert lines == [f"resume: passed over {run}/checkpoint_00000020_a (step 20): no commit marker: __1_0.distcp missing",
                     f"resume: step 10, the newest complete checkpoint (committed): {run}/checkpoint_00000010_a"]


def test_the_resume_takes_the_newer_of_the_two_committed_checkpoints_kept(tmp_path):
    """Retiring keeps two committed checkpoints (10 and 20): a retry resumes at 20; from 10 it would train steps
    11 to 20 (their rows) a second time."""
    run = tmp_path / "run"
    _write(run / "checkpoint_00000010_a", 10)
    _write(run / "checkpoint_00000020_a", 20)
    chosen, lines = ckpt.resume_choice(str(run))
    assert chosen == f"{run}/checkpoint_00000020_a"
    assert lines == [f"resume: step 20, the newest complete checkpoint (committed): {run}/checkpoint_00000020_a"]


def test_nothing_committed_starts_from_step_0_and_says_so(tmp_path):
    _write(tmp_path / "run" / "checkpoint_00000010_a", 10, committed=False)
    chosen, lines = ckpt.resume_choice(str(tmp_path / "run"))
    assert chosen is None and lines[-1] == "resume: no complete checkpoint; training starts from step 0"
    assert ckpt.newest_line(str(tmp_path / "run")) == "no checkpoint is committed: a retry or a rerun starts from step 0"


def test_the_commit_waits_for_the_last_ranks_files_then_writes_the_marker(tmp_path, monkeypatch):
    """Rank 1's shard arrives 0.3 s after rank 0 starts to commit: the marker comes after it, not before."""
    monkeypatch.setattr(ckpt, "COMMIT_POLL_S", 0.05)
    folder = _write(tmp_path / "checkpoint_00000010_a", 10, without=("__1_0.distcp",), committed=False)
    arrived = []

    def late_upload() -> None:
        time.sleep(0.3)
        (folder / "__1_0.distcp").write_bytes(bytes(64))
        arrived.append(time.monotonic())

    threading.Thread(target=late_upload).start()
    ckpt.commit(str(folder), world=2, timeout_s=10)
    assert (folder / COMMIT).exists() and arrived
    assert (folder / COMMIT).stat().st_mtime >= (folder / "__1_0.distcp").stat().st_mtime


def test_a_commit_whose_files_never_arrive_names_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt, "COMMIT_POLL_S", 0.05)
    folder = _write(tmp_path / "checkpoint_00000010_a", 10, without=("rng-rank1.pt",), committed=False)
    with pytest.raises(TimeoutError, match=r"not committed: rng-rank1.pt missing \(rank 1's random state\) after 0.2 s"):
        ckpt.commit(str(folder), world=2, timeout_s=0.2)
    assert not (folder / COMMIT).exists()


def test_the_world_size_decides_whose_random_state_is_needed(tmp_path):
    folder = _write(tmp_path / "c", 10, without=("rng-rank1.pt",))
    fs, path = filesystem(str(folder))
    assert missing_files(fs, path, world=1) is None
    assert missing_files(fs, path, world=2) == "rng-rank1.pt missing (rank 1's random state)"


def test_retiring_keeps_the_newest_two_and_what_may_still_be_arriving(tmp_path):
    """Committed 10, 20, 30; partial 25 (cut off: never usable, 30 is newer and whole) and 40 (rank 1 may still be
    uploading it); a folder without train state yet (its rank 0 files not there). 10 and 25 go."""
    run = tmp_path / "run"
    for step in (10, 20, 30):
        _write(run / f"checkpoint_{step:08d}_a", step)
    _write(run / "checkpoint_00000025_a", 25, committed=False, without=("__1_0.distcp",))
    _write(run / "checkpoint_00000040_a", 40, committed=False, without=("__1_0.distcp",))
    _write(run / "checkpoint_00000050_a", 50, committed=False, without=("train_state.json", ".metadata"))
    gone = ckpt.retire(str(run))
    assert sorted(gone) == [f"{run}/checkpoint_00000010_a", f"{run}/checkpoint_00000025_a"]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint_00000020_a", "checkpoint_00000030_a",
                                                     "checkpoint_00000040_a", "checkpoint_00000050_a"]


def _linear():
    import torch

    model = torch.nn.Linear(2, 2)
    return model, torch.optim.AdamW(model.parameters())


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_background_save_whose_upload_is_refused_stops_the_run_at_the_next_step(tmp_path):
    """The storage refuses the upload (S3 AccessDenied) while the next steps run: poll() after the next step raises,
    so the run stops and its retry resumes the newest committed checkpoint, instead of training on with nothing
    saved and losing every step since at the next crash. One process, no process group: DCP saves alone."""
    def refused(local: str, uri: str) -> None:
        raise PermissionError(f"AccessDenied: PutObject on {uri}")

    logged = []
    saves = ckpt.Checkpoints(False, 0, 1, str(tmp_path / "run"), "a", logged.append, upload=refused)
    saves.save(*_linear(), step=10, data_position=10)
    saves.shipments[0].done.exception(timeout=30)  # the background upload has failed
    with pytest.raises(ckpt.CheckpointFailed, match=r"^checkpoint of step 10: PermissionError: AccessDenied: PutObject"):
        saves.poll()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_stop_save_on_rank_1_returns_only_once_rank_0_has_committed_it(tmp_path, monkeypatch):
    """Rank 1's own upload is done, and rank 0's commit marker is not there yet: rank 0 writes it only once rank 1
    has looked for it (no clock involved, so load cannot hide a rank 1 that returns early). The stop's save
    (wait=True) answers the pod's preStop hook when it returns: returning before the marker would let the kubelet
    kill the pod while the checkpoint is still uncommitted (Kubernetes runs the hook, then sends SIGTERM)."""
    from training import storage

    monkeypatch.setattr(ckpt, "COMMIT_POLL_S", 0.01)
    run = tmp_path / "run"
    marker = run / ckpt.checkpoint_folder_name(10, "a") / COMMIT
    events: list[str] = []

    def upload(local: str, uri: str) -> None:
        storage.upload_folder(local, uri)
        events.append("rank 1 uploaded" + (", marker there" if marker.exists() else ""))

    storage_exists = storage.exists

    def exists(uri: str) -> bool:
        found = storage_exists(uri)
        if uri == str(marker) and not found:  # rank 1 waits for the marker: rank 0 commits now
            events.append("rank 1 looked; rank 0 commits")
            marker.write_text("{}")
        return found

    monkeypatch.setattr(storage, "exists", exists)
    ckpt.Checkpoints(False, 1, 2, str(run), "a", print, upload=upload).save(*_linear(), step=10, data_position=10,
                                                                            wait=True)
    events.append("save returned" + (" after the marker" if marker.exists() else " before the marker"))
    assert events == ["rank 1 uploaded", "rank 1 looked; rank 0 commits", "save returned after the marker"]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_stopping_line_names_the_save_that_was_still_uploading_when_the_loop_stopped(tmp_path, capsys):
    """One worker; step 10's upload takes 0.2 s and the loop stops right after the save began: finish() waits for
    it, so the line names step 10, committed by then, not 'no checkpoint is committed'."""
    from training.storage import upload_folder

    def slow_upload(local: str, uri: str) -> None:
        time.sleep(0.2)
        upload_folder(local, uri)

    run = tmp_path / "run"
    saves = ckpt.Checkpoints(False, 0, 1, str(run), "a", print, upload=slow_upload)
    saves.save(*_linear(), step=10, data_position=10)
    line = saves.finish()
    uri = f"{run}/{ckpt.checkpoint_folder_name(10, 'a')}"
    assert line == f"the newest committed checkpoint is step 10 ({uri}): a retry or a rerun resumes there"
    assert f"rank 0 stopping: {line}" in capsys.readouterr().out


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_retry_that_saves_a_step_again_never_mixes_in_what_an_earlier_attempt_left_there(tmp_path):
    """Attempt a (2 workers) was cut off saving step 10: only rank 1's shard and random state arrived. Attempt b
    (1 worker) saves step 10 again: its checkpoint holds its own files only, no rank 1 state of another world size
    that a resume would restore, and a's partial folder stays what it was."""
    run = tmp_path / "run"
    earlier = _write(run / ckpt.checkpoint_folder_name(10, "a"), 10, committed=False,
                     without=(".metadata", "__0_0.distcp", "rng-rank0.pt", "train_state.json"))
    ckpt.Checkpoints(False, 0, 1, str(run), "b", print).save(*_linear(), step=10, data_position=10, wait=True)
    chosen, _ = ckpt.resume_choice(str(run))
    assert chosen is not None and not (Path(chosen) / "rng-rank1.pt").exists()
    assert sorted(p.name for p in earlier.iterdir()) == ["__1_0.distcp", "rng-rank1.pt"]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_save_the_trainer_wrote_counts_only_once_committed(tmp_path):
    """Every file of a one-worker save is there but rank 0 stopped before its commit marker: the trainer's own
    save states the commit protocol, so it is passed over and not taken for a checkpoint written before markers."""
    folder = tmp_path / "run" / ckpt.checkpoint_folder_name(10, "a")
    ckpt.save(folder, *_linear(), step=10, data_position=10, rank=0, world=1)
    [found] = scan_checkpoints(str(tmp_path / "run"))
    assert (found.complete, found.why) == (False, "no commit marker: every file is there, but the save stopped before its commit")
