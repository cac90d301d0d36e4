"""The first-minute storage check reads its probe back: a role that may write but not read (s3:PutObject without
s3:GetObject) would otherwise pass, then fail at the first resume or export."""

import pytest

from training import storage
from training.runtime_checks import FirstMinuteCheckFailed, check_storage


def test_a_storage_path_that_cannot_be_read_back_stops_the_worker(tmp_path, monkeypatch):
    def denied(uri):
        raise OSError("AccessDenied: s3:GetObject")

    monkeypatch.setattr(storage, "read_text", denied)
    with pytest.raises(FirstMinuteCheckFailed, match=r"^storage: gpu-worker-0 cannot write, read and delete .* "
                                                     r"\(AccessDenied: s3:GetObject\)"):
        check_storage(str(tmp_path / "runs" / "ft-1"), "gpu-worker-0")
