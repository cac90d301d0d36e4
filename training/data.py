"""Training data: synthetic token streams, or real text through Ray Data, packed to blocks.

Every source yields blocks of seq_len + 1 token ids (inputs and shifted labels) and is
addressed by a position, the number of micro-batches a worker has consumed, so that a
resumed run continues where the checkpoint left off.
"""

from __future__ import annotations

import functools
from typing import Iterator

import numpy as np
import torch


def synthetic_block(kind: str, seed: int, index: int, vocab_size: int, length: int) -> torch.Tensor:
    """Sequence `index` of a synthetic stream; a pure function of (seed, index).

    random: uniform token ids (throughput and transport runs; loss stays near ln(vocab)).
    pattern: x_t = (a + d * t) mod vocab with per-sequence a and d, learnable from context.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
    if kind == "random":
        return torch.randint(0, vocab_size, (length,), generator=generator)
    start = int(torch.randint(0, vocab_size, (1,), generator=generator))
    stride = int(torch.randint(1, 8, (1,), generator=generator))
    return (start + stride * torch.arange(length)) % vocab_size


def synthetic_batches(kind: str, seed: int, vocab_size: int, seq_len: int, micro_batch: int,
                      rank: int, world_size: int, position: int = 0) -> Iterator[torch.Tensor]:
    """Micro-batches for one worker, from micro-batch `position` on.

    Micro-step m of rank r holds global sequences m*W*B + r*B ... + B-1, so one worker with
    micro-batch W*B sees exactly the union of what W workers with micro-batch B see.
    """
    m = position
    while True:
        first = m * world_size * micro_batch + rank * micro_batch
        yield torch.stack([synthetic_block(kind, seed, first + i, vocab_size, seq_len + 1) for i in range(micro_batch)])
        m += 1


# ---------------------------------------------------------------- real text (Ray Data)


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str, cache_dir: str | None, revision: str | None = None):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, cache_dir=cache_dir, revision=revision)


def tokenize_and_pack(batch: dict, tokenizer_path: str, seq_len: int, text_field: str = "text",
                      cache_dir: str | None = None, revision: str | None = None) -> dict:
    """Ray Data map_batches function: records -> packed blocks of seq_len + 1 token ids.

    A record's `messages` (chat) is rendered with the tokenizer's chat template; otherwise
    `text_field` is used. Documents are joined with EOS; the tail shorter than a block is
    dropped (at most one block per batch of records).
    """
    tokenizer = _tokenizer(tokenizer_path, cache_dir, revision)
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    texts = []
    messages = batch.get("messages")
    for i in range(len(next(iter(batch.values())))):
        if messages is not None and isinstance(messages[i], (list, np.ndarray)) and len(messages[i]) > 0:
            chat = [dict(m) for m in messages[i]]
            texts.append(tokenizer.apply_chat_template(chat, tokenize=False))
        else:
            texts.append(str(batch[text_field][i]))
    stream: list[int] = []
    for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        stream.append(eos)
    block = seq_len + 1
    n_blocks = len(stream) // block
    blocks = np.asarray(stream[: n_blocks * block], dtype=np.int64).reshape(n_blocks, block)
    return {"input_ids": blocks}


def read_text_dataset(path: str, tokenizer_path: str, seq_len: int, text_field: str, cache_dir: str | None,
                      revision: str | None = None):
    """A Ray Dataset of packed blocks from JSONL or Parquet (file or folder, local or s3://)."""
    import ray.data

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    lower = path.rstrip("/").lower()
    if lower.endswith(".parquet"):
        ds = ray.data.read_parquet(path)
    elif lower.endswith((".jsonl", ".json")):
        ds = ray.data.read_json(path, lines=lower.endswith(".jsonl"))
    else:
        ds = _read_folder(path)
    return ds.map_batches(
        tokenize_and_pack, batch_format="numpy", batch_size=256,
        fn_kwargs={"tokenizer_path": tokenizer_path, "seq_len": seq_len, "text_field": text_field, "cache_dir": cache_dir,
                   "revision": revision},
    )


def _read_folder(path: str):
    import ray.data

    try:
        return ray.data.read_parquet(path, file_extensions=["parquet"])
    except (ValueError, FileNotFoundError):
        return ray.data.read_json(path, lines=True, file_extensions=["jsonl"])


def dataset_batches(shard, micro_batch: int, position: int = 0) -> Iterator[torch.Tensor]:
    """Micro-batches from a worker's Ray Data shard, skipping `position` already consumed; epochs repeat."""
    consumed = 0
    while True:
        produced = False
        for batch in shard.iter_torch_batches(batch_size=micro_batch, drop_last=True):
            produced = True
            if consumed < position:
                consumed += 1
                continue
            consumed += 1
            yield batch["input_ids"]
        if not produced:
            raise RuntimeError("--data: the dataset yields no full micro-batch; use more text or a smaller --seq-len/--micro-batch")
