"""Leaving a gloo process group in the spawned workers of the FSDP tests."""

import torch.distributed as dist


def leave() -> None:
    """Every rank reaches here before any tears its group down: a rank that destroys its group while a peer
    still works on it (rank 0 saving the results) aborted the peer's gloo threads under load ("terminate
    called without an active exception", SIGABRT)."""
    dist.barrier()
    dist.destroy_process_group()
