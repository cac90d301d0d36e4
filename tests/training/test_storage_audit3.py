"""Cases of training.storage off the checkpoint path: copying a folder down from storage, and scanning a run
folder that is not a folder."""

from __future__ import annotations

from training.storage import download_folder, scan_checkpoints


def test_download_folder_copies_every_file_with_its_subfolders_and_returns_the_local_path(tmp_path):
    source = tmp_path / "stored"
    (source / "hf" / "adapter").mkdir(parents=True)
    (source / "train_state.json").write_text('{"step": 3}')
    (source / "hf" / "adapter" / "adapter_config.json").write_text('{"r": 8}')
    local = tmp_path / "local" / "copy"  # its parent does not exist yet: made on the way
    assert download_folder(str(source), local) == str(local)
    assert (local / "train_state.json").read_text() == '{"step": 3}'
    assert (local / "hf" / "adapter" / "adapter_config.json").read_text() == '{"r": 8}'


def test_a_run_path_that_is_a_file_has_no_checkpoints(tmp_path):
    """--storage-path/--run-name pointing at a file (a typo): no checkpoint to resume from, not a traceback."""
    run = tmp_path / "run"
    run.write_text("not a folder")
    assert scan_checkpoints(str(run)) == []
