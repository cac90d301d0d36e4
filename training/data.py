"""Training data: synthetic token streams, or real text and chat through Ray Data, packed to blocks.

A micro-batch is a dict of [micro_batch, seq_len] tensors: input_ids, labels (the next token, or
IGNORE_INDEX where nothing is to be learned) and, for real data, position_ids that restart at 0
at every document packed into a block: the attention kernel then keeps documents apart
(transformers builds the document mask from them when no attention mask is given).

Every source is addressed by a position, the number of micro-batches a worker has consumed, so
that a resumed run continues where the checkpoint left off.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from training.chat_masks import MARKER, learned_tokens, render
from training.loss import IGNORE_INDEX
from training.sources import DataError, read_source

# Synthetic validation data: the same task on sequences the training stream never holds.
VALIDATION_SEED_OFFSET = 7_919


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
                      rank: int, world_size: int, position: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """Micro-batches for one worker, from micro-batch `position` on; plain causal attention.

    Micro-step m of rank r holds global sequences m*W*B + r*B ... + B-1, so one worker with
    micro-batch W*B sees exactly the union of what W workers with micro-batch B see.
    """
    m = position
    while True:
        first = m * world_size * micro_batch + rank * micro_batch
        blocks = torch.stack([synthetic_block(kind, seed, first + i, vocab_size, seq_len + 1) for i in range(micro_batch)])
        yield {"input_ids": blocks[:, :-1], "labels": blocks[:, 1:]}
        m += 1


# ---------------------------------------------------------------- records to documents


@dataclass(frozen=True)
class DataFormat:
    """Which fields of a record hold what, and what is learned from chat."""

    text_field: str = "text"
    messages_field: str = "messages"
    prompt_fields: tuple[str, ...] = ()
    """Instruction data: these fields, joined by blank lines, are the user turn..."""
    response_field: str | None = None
    """...and this one the assistant's reply."""
    assistant_only_loss: bool = True
    """Chat: learn the assistant turns only (the prompt tokens get no target)."""
    tools_field: str = "tools"
    """Chat: the tool definitions offered to the model, passed to the chat template as `tools`."""
    chat_template: str | None = None
    """A Jinja chat template used instead of the tokenizer's own (chat_template_text)."""
    default_system_prompt: bool = True
    """False: a chat with no system turn gets an empty one, where the template would add its own text."""


def _present(value) -> bool:
    """A field that holds something: a mixed JSONL read by Ray Data fills the fields a record lacks with null or NaN."""
    if isinstance(value, float):
        return value == value
    return value is not None and not (isinstance(value, str) and value == "")


def _preview(record: dict) -> str:
    """A record as a short line of JSON, so that a refusal names the record (grep finds it)."""
    text = json.dumps(_plain(record), default=str, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."


def _null(value) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _plain(value):
    """A value as Ray Data hands it over, as plain JSON-like Python: numpy arrays become lists, and
    the nulls Arrow fills into the keys a struct lacks (a key another record has) are dropped; empty
    strings are values and stay."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if not _null(v)}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _text_parts(content) -> bool:
    return isinstance(content, list) and bool(content) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str) for part in content)


def _other_part(content) -> str | None:
    """The type of the first part that is not text (an image, audio) in a list of content parts."""
    if not isinstance(content, list):
        return None
    for part in content:
        if isinstance(part, dict) and part.get("type") not in (None, "text"):
            return str(part["type"])
    return None


def _message(raw, record: dict) -> dict:
    """One chat message, as the template will see it: every field it carries (tool_calls, name,
    tool_call_id...), and content that is a string, None on an assistant turn that calls tools, or a
    list of text parts; anything else is refused, naming the record."""
    message = _plain(raw) if isinstance(raw, dict) else None
    if not message or not isinstance(message.get("role"), str):
        raise DataError(f"--messages-field: a message is not a {{role, content}} object in record {_preview(record)}")
    content = message.get("content")
    calls_tools = message["role"] == "assistant" and bool(message.get("tool_calls"))
    other = _other_part(content)
    if other is not None:
        raise DataError(f"--messages-field: a {message['role']} message holds a {other!r} part; this trainer learns "
                        f"text only (remove the record or its non-text parts); record {_preview(record)}")
    if not (isinstance(content, str) or (content is None and calls_tools) or _text_parts(content)):
        raise DataError(f"--messages-field: a {message['role']} message's content must be a string, a list of "
                        f"text parts, or null on an assistant turn with tool_calls; record {_preview(record)}")
    message["content"] = content
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):
            # OpenAI's form (a JSON string): templates render arguments with `tojson`, which would
            # quote the string a second time, so the model would learn escaped JSON.
            try:
                function["arguments"] = json.loads(arguments)
            except ValueError:
                raise DataError(f"--messages-field: a tool call's arguments are not JSON; record {_preview(record)}") from None
    return message


def record_messages(record: dict, fmt: DataFormat) -> list[dict] | None:
    """The record as a chat (a list of messages), or None when it is plain text."""
    if fmt.response_field is not None:
        response = record.get(fmt.response_field)
        if not isinstance(response, str) or not response:
            raise DataError(f"--response-field: {fmt.response_field!r} must hold a non-empty string; "
                            f"record {_preview(record)}")
        parts = [record[f] for f in fmt.prompt_fields if _present(record.get(f))]
        if not parts or not all(isinstance(p, str) for p in parts):
            raise DataError(f"--prompt-field: {', '.join(fmt.prompt_fields)} must hold text; record {_preview(record)}")
        return [{"role": "user", "content": "\n\n".join(parts)}, {"role": "assistant", "content": response}]
    messages = record.get(fmt.messages_field)
    if not _present(messages) or len(messages) == 0:
        return None
    return [_message(m, record) for m in messages]


def record_tools(record: dict, fmt: DataFormat) -> list | None:
    """The tool definitions a chat record offers the model (TRL's `tools` column), for the template."""
    tools = record.get(fmt.tools_field)
    return _plain(tools) if _present(tools) and len(tools) else None


def template_renders_parts(tokenizer, template: str | None = None) -> bool:
    """Whether the template renders content given as a list of text parts. Templates written for strings
    either fail on a list (Qwen2.5's: "can only concatenate str (not list)") or render it as nothing
    (Qwen3's `content is string` branch): tried with a marker as the only part."""
    probe = [{"role": "user", "content": [{"type": "text", "text": MARKER}]}]
    try:
        return MARKER in render(tokenizer, probe, None, template)
    except Exception:  # the template's own failure on a list: it expects a string
        return False


def joined_parts(messages: list[dict]) -> list[dict]:
    """Text parts joined into one string per message, for a template that expects a string; joined with a
    newline, as vLLM serves such a template (its "string" content format, chat_utils.py)."""
    return [{**m, "content": "\n".join(p["text"] for p in m["content"])} if isinstance(m.get("content"), list) else m
            for m in messages]


def adds_default_system_prompt(tokenizer, template: str | None = None) -> bool:
    """Whether the template writes a system turn of its own text into a chat that has none (Qwen2.5:
    'You are Qwen, created by Alibaba Cloud...'): a lone user turn then renders as something other
    than the tail of the same turn after an empty system turn."""
    user = [{"role": "user", "content": MARKER}]
    alone = render(tokenizer, user, None, template)
    with_empty = render(tokenizer, [{"role": "system", "content": ""}] + user, None, template)
    # Longer alone: the template wrote text of its own (a template that merely lays out an empty
    # system turn differently, as Mistral's adds a blank line, renders the lone turn shorter).
    return not with_empty.endswith(alone) and len(alone) > len(with_empty)


def tokenize_records(records: list[dict], tokenizer, fmt: DataFormat) -> list[tuple[list[int], list[bool], bool]]:
    """Each record as (token ids, which tokens are learned, is chat). Plain text learns every token;
    chat, with assistant_only_loss, only the assistant turns. Each document ends with EOS."""
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    chats = [record_messages(r, fmt) for r in records]
    if not fmt.default_system_prompt and any(chats) and adds_default_system_prompt(tokenizer, fmt.chat_template):
        chats = [[{"role": "system", "content": ""}] + chat if chat and chat[0]["role"] != "system" else chat
                 for chat in chats]
    if any(chat and any(isinstance(m["content"], list) for m in chat) for chat in chats) \
            and not template_renders_parts(tokenizer, fmt.chat_template):
        chats = [joined_parts(chat) if chat else chat for chat in chats]
    tools = [record_tools(r, fmt) if chat is not None else None for r, chat in zip(records, chats)]
    texts = []
    for record, chat, offered in zip(records, chats, tools):
        if chat is None:
            if not _present(record.get(fmt.text_field)):
                raise DataError(f"--text-field: a record has neither {fmt.text_field!r} nor "
                                f"{fmt.messages_field!r} (fields: {', '.join(sorted(record))})")
            texts.append(str(record[fmt.text_field]))
            continue
        if getattr(tokenizer, "chat_template", None) is None and fmt.chat_template is None:
            raise DataError("--data: chat records need a tokenizer with a chat template; this one has none "
                            "(give one with --chat-template)")
        try:
            texts.append(render(tokenizer, chat, offered, fmt.chat_template))
        except Exception as error:  # the template's own refusal (jinja raise_exception, a missing key)
            raise DataError(f"--data: the chat template cannot render record {_preview(record)}: "
                            f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    # Plain text gets the tokenizer's own special tokens (a BOS for Llama, Mistral, Gemma; none for Qwen), as
    # TRL tokenizes it; a rendered chat already holds the template's (its bos_token), so none is added again.
    encoded = [None] * len(texts)
    for plain in (True, False):
        which = [i for i, chat in enumerate(chats) if (chat is None) == plain]
        if which:
            batch = tokenizer([texts[i] for i in which], add_special_tokens=plain, return_offsets_mapping=True)
            for i, ids, offsets in zip(which, batch["input_ids"], batch["offset_mapping"]):
                encoded[i] = (ids, offsets)
    documents = []
    for chat, offered, text, (ids, offsets) in zip(chats, tools, texts, encoded):
        if chat is not None and fmt.assistant_only_loss:
            learned = learned_tokens(chat, tokenizer, text, ids, offsets, offered, fmt.chat_template)
        else:
            learned = [True] * len(ids)
        ids = list(ids)
        if not ids or ids[-1] != eos:
            # EOS is learned where the token before it is: after a reply, not after a prompt.
            ids.append(eos)
            learned.append(bool(learned) and learned[-1])
        documents.append((ids, learned, chat is not None))
    return documents


# ---------------------------------------------------------------- documents to blocks


def document_targets(ids: list[int], learned: list[bool]) -> list[int]:
    """Each token's target: the next token of the same document where that one is learned.
    A document's last token has none, so a document never learns the next one's first token."""
    return [ids[i + 1] if learned[i + 1] else IGNORE_INDEX for i in range(len(ids) - 1)] + [IGNORE_INDEX]


# What a block holds besides the model's inputs: per-block counts that travel with it, so that the
# training loop can say what the data really was (metrics.DataCounts).
MODEL_INPUTS = ("input_ids", "labels", "position_ids")
BLOCK_COUNTS = ("real_tokens", "truncated", "unlearned")


def model_inputs(batch: dict) -> dict:
    """A batch without its counts: what the model's forward takes. Positions that run 0, 1, 2, ... along every
    row (no document starts inside a block) are left out: the model then runs plain causal attention, with no
    mask to build, and SDPA keeps its fastest kernel."""
    inputs = {k: v for k, v in batch.items() if k not in BLOCK_COUNTS}
    if "position_ids" in inputs and _plain_positions(inputs["position_ids"]):
        del inputs["position_ids"]
    return inputs


def _plain_positions(positions) -> bool:
    """Whether every row is 0, 1, 2, ...; decided on the host only (reading a GPU tensor would be a sync)."""
    if isinstance(positions, torch.Tensor):
        if positions.device.type != "cpu":
            return False
        positions = positions.numpy()
    return bool((positions == np.arange(positions.shape[-1])).all())


def pack(documents: list[tuple[list[int], list[bool], bool]], seq_len: int, pad_id: int) -> dict[str, np.ndarray]:
    """Documents into blocks of seq_len tokens, best fit (longest first), with per-document positions.

    Plain text longer than a block is cut into block-sized pieces (each piece attends only to
    itself); a longer chat is truncated, since its replies need their prompt. The rest of a
    block is padding: its own positions, no targets. Besides the model's inputs, each block
    carries its counts (BLOCK_COUNTS): tokens that are not padding, chats truncated to fit, and
    documents (or pieces) left with no token to learn.
    """
    pieces = []  # (ids, targets, truncated)
    for ids, learned, is_chat in documents:
        targets = document_targets(ids, learned)
        starts = [0] if is_chat else range(0, len(ids), seq_len)
        pieces.extend((ids[s:s + seq_len], targets[s:s + seq_len], is_chat and len(ids) > seq_len) for s in starts)
    order = sorted(range(len(pieces)), key=lambda i: (-len(pieces[i][0]), i))
    blocks: list[list[int]] = []  # piece indices per block
    room: list[int] = []
    for i in order:
        size = len(pieces[i][0])
        fits = [b for b in range(len(blocks)) if room[b] >= size]
        if fits:
            best = min(fits, key=lambda b: (room[b], b))
        else:
            best = len(blocks)
            blocks.append([])
            room.append(seq_len)
        blocks[best].append(i)
        room[best] -= size
    shape = (len(blocks), seq_len)
    out = {"input_ids": np.full(shape, pad_id, np.int64), "labels": np.full(shape, IGNORE_INDEX, np.int64),
           "position_ids": np.zeros(shape, np.int64)} | {k: np.zeros(len(blocks), np.int64) for k in BLOCK_COUNTS}
    for b, members in enumerate(blocks):
        at = 0
        for i in members:
            ids, targets, truncated = pieces[i]
            out["input_ids"][b, at:at + len(ids)] = ids
            out["labels"][b, at:at + len(ids)] = targets
            out["position_ids"][b, at:at + len(ids)] = np.arange(len(ids))
            out["truncated"][b] += truncated
            out["unlearned"][b] += all(t == IGNORE_INDEX for t in targets)
            at += len(ids)
        out["position_ids"][b, at:] = np.arange(seq_len - at)
        out["real_tokens"][b] = at
    return out


def in_validation(ids: list[int], fraction: float) -> bool:
    """A document's side of the validation split: a hash of its tokens, so the split is the
    same on every run and worker, and a duplicate never lands on both sides."""
    digest = hashlib.blake2b(np.asarray(ids, np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < fraction


def chat_template_text(source: str, cache_dir: str | None = None) -> str:
    """--chat-template's text: a Jinja file (local or s3://), or the template of a Hub model's tokenizer."""
    from training.config import chat_template_is_file

    if chat_template_is_file(source):
        from training.storage import read_text

        return read_text(source)
    from transformers import AutoTokenizer

    template = AutoTokenizer.from_pretrained(source, cache_dir=cache_dir).chat_template
    if not isinstance(template, str):
        raise DataError(f"--chat-template: {source}'s tokenizer has no (single) chat template")
    return template


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str, cache_dir: str | None, revision: str | None = None):
    from transformers import AutoTokenizer

    from training.storage import local_model_path

    return AutoTokenizer.from_pretrained(local_model_path(path, cache_dir), cache_dir=cache_dir, revision=revision)


def tokenize_and_pack(batch: dict, tokenizer_path: str, seq_len: int, fmt: DataFormat, cache_dir: str | None = None,
                      revision: str | None = None, part: str = "train", val_fraction: float = 0.0) -> dict:
    """Ray Data map_batches function: records -> packed blocks (pack), for one side of the split."""
    tokenizer = _tokenizer(tokenizer_path, cache_dir, revision)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    size = len(next(iter(batch.values())))
    records = [{k: v[i] for k, v in batch.items()} for i in range(size)]
    documents = tokenize_records(records, tokenizer, fmt)
    if val_fraction > 0:
        documents = [d for d in documents if in_validation(d[0], val_fraction) == (part == "validation")]
    if not documents:
        return {k: np.zeros((0, seq_len), np.int64) for k in MODEL_INPUTS} | {k: np.zeros(0, np.int64) for k in BLOCK_COUNTS}
    return pack(documents, seq_len, pad)


# Blocks the records are cut into before the shuffle (the order depends on it, not on the cluster).
SHUFFLE_INPUT_BLOCKS = 64


def packed_dataset(path: str, tokenizer_path: str, seq_len: int, fmt: DataFormat, cache_dir: str | None,
                   revision: str | None = None, part: str = "train", val_fraction: float = 0.0,
                   shuffle_seed: int | None = None):
    """A Ray Dataset of packed blocks: one side (train or validation) of a source.

    shuffle_seed: the records are shuffled across files and blocks before packing, the same way on
    every execution of the dataset and every cluster size (so a resumed run replays the order it had;
    every epoch has this order, re-permuted in windows: training.data_plan); None keeps file order.
    """
    records = read_source(path)
    if shuffle_seed is not None:
        from ray.data import RandomSeedConfig

        # The shuffle permutes within and across its input blocks, and a read makes as many blocks as the
        # cluster has CPUs: a fixed count keeps the order the same on a resume on another cluster size.
        records = records.repartition(SHUFFLE_INPUT_BLOCKS).random_shuffle(
            seed=RandomSeedConfig(seed=shuffle_seed, reseed_after_execution=False))
    return records.map_batches(
        tokenize_and_pack, batch_format="numpy", batch_size=256,
        fn_kwargs={"tokenizer_path": tokenizer_path, "seq_len": seq_len, "fmt": fmt, "cache_dir": cache_dir,
                   "revision": revision, "part": part, "val_fraction": val_fraction},
    )
