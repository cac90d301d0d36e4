"""training.checkpoint, case by case: each rank's random stream (seeded, saved, restored), the data position, the
retiring of old checkpoints and the lines that name what a retry resumes from. One process, no process group:
DCP saves and loads alone; hand-built folders where only the files' presence matters."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from training import checkpoint as ckpt

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _draws() -> tuple:
    """One draw from each generator a rank seeds (torch CPU, Python, numpy)."""
    return torch.rand(3).tolist(), random.random(), float(np.random.rand())


def _linear():
    model = torch.nn.Linear(2, 2)
    return model, torch.optim.AdamW(model.parameters())


@pytest.mark.parametrize("seed, rank", [(5, 0), (5, 1), (6, 0)])
def test_each_rank_draws_the_stream_of_seed_plus_rank(seed, rank):
    """seed_rank's rule (seed + rank): rank 1 of seed 5 draws what rank 0 of seed 6 draws, and every generator
    follows it, not torch's alone."""
    torch.manual_seed(seed + rank)
    random.seed(seed + rank)
    np.random.seed(seed + rank)
    expected = _draws()
    ckpt.seed_rank(seed, rank)
    assert _draws() == expected


def test_two_ranks_of_one_run_draw_different_streams():
    ckpt.seed_rank(5, 0)
    rank0 = _draws()
    ckpt.seed_rank(5, 1)
    rank1 = _draws()
    assert all(a != b for a, b in zip(rank0, rank1))


@pytest.fixture
def two_rank_checkpoint(tmp_path):
    """A checkpoint of a 2-worker run: rank 0's shards and train state, each rank's random state after seed_rank(7, r)
    and one draw; returns it and what each rank draws next (what the resumed rank must draw)."""
    folder = tmp_path / "checkpoint"
    following = {}
    for rank in (0, 1):
        ckpt.seed_rank(7, rank)
        _draws()
        if rank == 0:
            ckpt.save(folder, *_linear(), step=4, data_position=16, rank=0, world=2)
        else:
            ckpt.save_rng(folder, rank)
        following[rank] = _draws()
    return folder, following


@pytest.mark.parametrize("rank", [0, 1])
def test_a_resumed_rank_draws_on_from_its_own_saved_state(two_rank_checkpoint, rank):
    folder, following = two_rank_checkpoint
    ckpt.seed_rank(99, rank)  # a fresh process: seeded anew before the load
    assert ckpt.load(folder, *_linear(), rank=rank) == (4, 16)
    assert _draws() == following[rank]


def test_a_rank_beyond_the_checkpoints_world_keeps_its_own_stream(two_rank_checkpoint):
    """Resumed on 3 workers: rank 2 has no saved state and draws its seed_rank stream."""
    folder, _ = two_rank_checkpoint
    model, optimizer = _linear()  # before the seeding: its initial weights draw from torch's generator
    ckpt.seed_rank(7, 2)
    expected = _draws()
    ckpt.seed_rank(7, 2)
    ckpt.load(folder, model, optimizer, rank=2)
    assert _draws() == expected


def _committed(run, step: int) -> str:
    """A committed one-worker checkpoint of `step` in `run`, as the trainer writes it (save, then commit)."""
    uri = f"{run}/{ckpt.checkpoint_folder_name(step, 'a')}"
    ckpt.save(uri, *_linear(), step=step, data_position=4 * step, rank=0, world=1)
    ckpt.commit(uri, world=1)
    return uri


def test_the_stopping_line_names_the_newest_of_the_committed_checkpoints(tmp_path):
    """Steps 10 and 20 committed: a retry resumes step 20, and the line a stopping rank prints says so."""
    _committed(tmp_path / "run", 10)
    newest = _committed(tmp_path / "run", 20)
    assert ckpt.newest_line(str(tmp_path / "run")) == (
        f"the newest committed checkpoint is step 20 ({newest}): a retry or a rerun resumes there")


def test_settle_gives_up_on_a_save_still_uploading_at_its_deadline_and_says_so(tmp_path):
    """The hang watchdog lets the saves in flight finish before it ends the process (before_exit: settle): an upload
    that hangs too must not keep a hung rank alive past settle's timeout."""
    import threading

    release = threading.Event()

    def hung_upload(local: str, uri: str) -> None:
        release.wait(30)
        # Released, the upload fails: its shipment ends there. Returning would send its thread on to wait for a
        # commit whose files never came (COMMIT_WAIT_S), and the process could not exit for half an hour.
        raise OSError("upload cut off")

    saves = ckpt.Checkpoints(False, 0, 1, str(tmp_path / "run"), "a", print, upload=hung_upload)
    saves.save(*_linear(), step=10, data_position=40)
    problems = []
    settling = threading.Thread(target=lambda: problems.extend(saves.settle(timeout_s=0.3)), daemon=True)
    settling.start()
    settling.join(5)  # a settle without its deadline would wait here for ever: fail, not hang
    release.set()
    assert not settling.is_alive()
    assert len(problems) == 1 and problems[0].startswith("checkpoint of step 10: not committed within 0.")


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_background_save_counts_only_once_committed(tmp_path):
    """The default, asynchronous save (AsyncSaver, on its own gloo group) states the commit protocol as the synchronous
    one does: written whole but not yet committed, it is passed over, not taken for a checkpoint from before commit
    markers (which would count as soon as its shards are in storage, without any rank's random state checked)."""
    import torch.distributed as dist

    from training.storage import scan_checkpoints

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        folder = tmp_path / "run" / ckpt.checkpoint_folder_name(10, "a")
        folder.mkdir(parents=True)
        model = torch.nn.Linear(2, 2)
        saver = ckpt.AsyncSaver()
        saver.start(str(folder), model, torch.optim.AdamW(model.parameters()), step=10, data_position=10, rank=0, world=1)
        saver.finish()
    finally:
        dist.destroy_process_group()
    [found] = scan_checkpoints(str(tmp_path / "run"))
    assert (found.complete, found.why) == (False, "no commit marker: every file is there, but the save stopped before its commit")
