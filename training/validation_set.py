"""The run's validation set: a number of global blocks fixed by its first attempt and stored with the run.

--eval-batches caps the micro-batches each worker evaluates, so on its own the set would change with the number
of workers (8 blocks on 2 workers, 4 on 1 at a micro-batch of 1 and --eval-batches 4): a resumed attempt on
another cluster would report val_loss over other data. The first attempt turns the cap into blocks (eval_batches
x workers x micro-batch) and writes them to <run>/validation.json; every later attempt evaluates those blocks,
whatever its own workers and micro-batch (training.data_plan.validation_share splits them).
"""

from __future__ import annotations

import json

import torch
import torch.distributed as dist

VALIDATION_FILE = "validation.json"


def fixed_blocks(run_uri: str, eval_batches: int, world: int, micro_batch: int) -> tuple[int, str]:
    """(the run's validation blocks, where they come from): read from the run's file, or set now (rank 0)."""
    from training.storage import exists, read_text, write_text

    uri = f"{run_uri}/{VALIDATION_FILE}"
    if exists(uri):
        stored = json.loads(read_text(uri))
        return int(stored["blocks"]), f"as the run's first attempt set them ({stored['set_by']})"
    blocks = eval_batches * world * micro_batch
    set_by = f"--eval-batches {eval_batches} x {world} workers x --micro-batch {micro_batch}"
    write_text(uri, json.dumps({"blocks": blocks, "set_by": set_by}))
    return blocks, set_by


def validation_batches(cfg, vocab_size: int, rank: int, world: int, device: torch.device,
                       blocks: int) -> tuple[list | None, dict | None]:
    """This worker's validation micro-batches, held for every evaluation, and what the validation holds over all
    workers (blocks, documents, targets, whole; real data only); (None, None) when the run has no validation data.
    Every worker reads the first `blocks` blocks of the validation stream and keeps every world-th micro-batch
    (each block evaluated once; the last micro-batch may be short); a worker with fewer pads with empty batches,
    since every worker must run the same number of forwards (each gathers the sharded weights)."""
    from training.config import SYNTHETIC_DATA
    from training.data import VALIDATION_SEED_OFFSET, synthetic_block
    from training.data_plan import dataset_pass, empty_batch, evaluated_counts, host_tensors, validation_share

    if cfg.val_data is None and cfg.val_fraction == 0:
        return None, None
    synthetic = cfg.data in SYNTHETIC_DATA
    if synthetic:  # global row i of the held-out synthetic stream, whatever the world size
        rows = ({"input_ids": block[:-1], "labels": block[1:]} for block in
                (synthetic_block(cfg.data, cfg.seed + VALIDATION_SEED_OFFSET, i, vocab_size, cfg.seq_len + 1).numpy()
                 for i in range(blocks)))
        mine, whole = validation_share(rows, cfg.micro_batch, rank, world, blocks)
        held = [host_tensors(batch) for batch in mine]
    else:
        import ray.train

        held, whole = dataset_pass(ray.train.get_dataset_shard("validation"), cfg.micro_batch, blocks, rank, world)
    mine_counts = evaluated_counts(held) if not synthetic else {"blocks": 0, "documents": 0, "targets": 0}
    sums = torch.tensor([len(held), mine_counts["blocks"], mine_counts["documents"], mine_counts["targets"]], device=device)
    most = sums[:1].clone()
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    dist.all_reduce(sums)
    if most.item() == 0:
        raise RuntimeError(f"--val-{'data' if cfg.val_data else 'fraction'}: the validation split holds no block; "
                           "give more validation data or a larger --val-fraction")
    counts = None if synthetic else \
        dict(zip(("blocks", "documents", "targets"), (int(v) for v in sums[1:].tolist()))) | {"whole": whole}
    return held + [empty_batch(cfg.seq_len)] * (int(most.item()) - len(held)), counts

