"""Starting test workers for a gloo process group, and leaving the group at their end."""

import multiprocessing
import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp

# What every worker imports, imported once by the fork server: a worker then starts in a second, not ten.
FORKSERVER_PRELOAD = ["torch", "torch.distributed.fsdp", "transformers.models.qwen2.modeling_qwen2", "peft",
                      "training.model", "training.step"]


def spawn(fn, args: tuple = (), nprocs: int = 1, join: bool = True, cuda: bool = False):
    """mp.spawn's contract, the workers forked from a fork server that preloaded FORKSERVER_PRELOAD. Never forked
    from the test process itself: a child forked after its parent ran torch's OpenMP pool waits on it forever.
    The server keeps the environment it started with: a test that sets variables for its workers passes them in.
    cuda: workers that use the GPU start as fresh interpreters instead (the 'spawn' method, seconds slower each): a
    child forked from a process where CUDA was initialised cannot use CUDA, and forked from the fork server,
    test_fp8_state's GPU workers failed at start-up so (H100, 2026-12-06); spawned, they ran."""
    if cuda:
        return mp.start_processes(fn, args=args, nprocs=nprocs, join=join, start_method="spawn")
    multiprocessing.get_context("forkserver").set_forkserver_preload(FORKSERVER_PRELOAD)
    return mp.start_processes(fn, args=args, nprocs=nprocs, join=join, start_method="forkserver")


def leave() -> None:
    """The worker's last statement. Every rank reaches the barrier before any tears its group down, and the
    process then ends without the interpreter's finalization: there, under load, gloo's threads were
    sometimes destroyed still running ("terminate called without an active exception", SIGABRT with no
    Python frame on the stack), failing a test whose work had all succeeded."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
