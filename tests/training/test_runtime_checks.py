"""The workers' first-minute checks: memlock for EFA, and the storage path through pyarrow."""

from __future__ import annotations

import http.server
import resource
import threading

import pyarrow
import pytest

from training import runtime_checks
from training.runtime_checks import FirstMinuteCheckFailed, check_memlock, check_storage, first_minute_checks
from tests.conftest import fake_aws_credentials

# systemd's DefaultLimitMEMLOCK (8M since systemd commit 852b625, as the kernel's since 5.16): what a
# container gets from a containerd unit that sets no LimitMEMLOCK.
SYSTEMD_DEFAULT_MEMLOCK = 8 * 1024 * 1024


@pytest.fixture
def memlock(monkeypatch):
    """Set what getrlimit(RLIMIT_MEMLOCK) answers in the checks."""
    def set_limit(soft, hard):
        real = resource.getrlimit
        monkeypatch.setattr(runtime_checks.resource, "getrlimit",
                            lambda which: (soft, hard) if which == resource.RLIMIT_MEMLOCK else real(which))
    return set_limit


def test_unlimited_memlock_passes(memlock):
    memlock(resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    check_memlock("gpu-worker-0")


def test_systemd_default_memlock_stops_the_worker_naming_the_host_and_the_fix(memlock):
    memlock(SYSTEMD_DEFAULT_MEMLOCK, SYSTEMD_DEFAULT_MEMLOCK)
    with pytest.raises(FirstMinuteCheckFailed, match=r"^memlock: `ulimit -l` is 8192 KiB on gpu-worker-0 .* EFA needs "
                       r"unlimited; give containerd LimitMEMLOCK=infinity on the GPU nodes: a systemd drop-in "
                       r"/etc/systemd/system/containerd\.service\.d/"):
        check_memlock("gpu-worker-0")


def test_an_unlimited_hard_limit_is_not_enough_when_the_soft_limit_is_low(memlock):
    # `ulimit -l` prints the soft limit, and memory registration is held to it
    memlock(65536, resource.RLIM_INFINITY)
    with pytest.raises(FirstMinuteCheckFailed, match=r"^memlock: `ulimit -l` is 64 KiB on gpu-worker-1 "):
        check_memlock("gpu-worker-1")


def test_memlock_is_not_checked_without_require_efa(memlock, tmp_path):
    memlock(SYSTEMD_DEFAULT_MEMLOCK, SYSTEMD_DEFAULT_MEMLOCK)
    first_minute_checks(str(tmp_path / "run"), "laptop", require_efa=False)


def test_memlock_is_checked_with_require_efa(memlock, tmp_path):
    memlock(SYSTEMD_DEFAULT_MEMLOCK, SYSTEMD_DEFAULT_MEMLOCK)
    with pytest.raises(FirstMinuteCheckFailed, match=r"^memlock: "):
        first_minute_checks(str(tmp_path / "run"), "gpu-worker-0", require_efa=True)


def test_a_writable_storage_path_passes_and_keeps_nothing(tmp_path):
    run = tmp_path / "runs" / "ft-1"
    check_storage(str(run), "gpu-worker-0")
    assert list(run.iterdir()) == []


def test_a_storage_path_below_a_file_stops_the_worker_naming_pyarrow(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(FirstMinuteCheckFailed,
                       match=rf"^storage: gpu-worker-0 cannot write, read and delete {tmp_path}/runs/ft-1/"
                             rf"\.first-minute-check-gpu-worker-0-\d+ through pyarrow {pyarrow.__version__} \("):
        check_storage(str(tmp_path / "runs" / "ft-1"), "gpu-worker-0")


class _DenyingS3(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that refuses every request as S3 does a role without access (403 AccessDenied)."""

    def _deny(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _deny

    def log_message(self, *args):
        pass


@pytest.fixture
def denying_s3(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DenyingS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # pyarrow's S3 client (the AWS SDK for C++) reads the endpoint and credentials from the environment
    fake_aws_credentials(monkeypatch, region="us-east-2", AWS_ENDPOINT_URL=f"http://127.0.0.1:{server.server_port}",
                         AWS_EC2_METADATA_DISABLED="true")
    yield
    server.shutdown()


def test_an_s3_storage_path_that_refuses_the_pods_credentials_stops_the_worker(denying_s3):
    with pytest.raises(FirstMinuteCheckFailed,
                       match=rf"^storage: gpu-worker-0 cannot write, read and delete s3://checkpoint-bucket/runs/ft-1/"
                             rf"\.first-minute-check-gpu-worker-0-\d+ through pyarrow {pyarrow.__version__} \(.*ACCESS_DENIED"
                             r".*\); on EKS the pods' credentials come from Pod Identity, which pyarrow's AWS SDK for "
                             r"C\+\+ reads from version 1\.11\.263$"):
        check_storage("s3://checkpoint-bucket/runs/ft-1", "gpu-worker-0")
