"""First-minute checks on every worker, before step 1 and before NCCL starts: what would otherwise
fail at the first EFA memory registration or at the first checkpoint, an hour in.

- memlock: EFA registers memory with the device and needs an unlimited RLIMIT_MEMLOCK (`ulimit -l`).
  A container inherits it from containerd on its node; nothing in a pod spec sets it.
- storage: Ray Train writes checkpoints through pyarrow's filesystems, whose S3 client reads the pod's
  credentials with its own AWS SDK for C++ (EKS Pod Identity needs 1.11.263 or later: EKS User Guide,
  pod-id-minimum-sdk). One small object is written, read back and deleted the same way.
"""

from __future__ import annotations

import os
import resource

MEMLOCK_FIX = ("give containerd LimitMEMLOCK=infinity on the GPU nodes: a systemd drop-in "
               "/etc/systemd/system/containerd.service.d/*.conf with [Service] LimitMEMLOCK=infinity, then "
               "systemctl daemon-reload and restart containerd (in the node group's launch template user data)")


class FirstMinuteCheckFailed(RuntimeError):
    """A worker cannot train here; the message is one line naming the node and the fix."""


def check_memlock(host: str) -> None:
    """`ulimit -l` is unlimited in this process (the soft limit: what memory registration is held to)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY:
        raise FirstMinuteCheckFailed(
            f"memlock: `ulimit -l` is {soft // 1024} KiB on {host} (on EKS the Ray pod; `kubectl get pod -o wide` "
            f"names its node), EFA needs unlimited; {MEMLOCK_FIX}")


def check_storage(run_uri: str, host: str) -> None:
    """Write, read back and delete one small object in the run's folder, with this process's credentials."""
    import pyarrow

    from training.storage import read_text, remove, write_text

    probe = f"{run_uri}/.first-minute-check-{host}-{os.getpid()}"
    try:
        write_text(probe, host)
        read_text(probe)
        remove(probe)
    except OSError as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise FirstMinuteCheckFailed(
            f"storage: {host} cannot write, read and delete {probe} through pyarrow {pyarrow.__version__} ({reason}); "
            "on EKS the pods' credentials come from Pod Identity, which pyarrow's AWS SDK for C++ reads from "
            "version 1.11.263") from None


def first_minute_checks(run_uri: str, host: str, require_efa: bool) -> None:
    """Every check this worker can make alone (no collective: NCCL may be what is broken)."""
    if require_efa:
        check_memlock(host)
    check_storage(run_uri, host)
