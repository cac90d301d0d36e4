"""All metric math: FLOPs per token, MFU, throughput, memory, and the per-step log line."""

from __future__ import annotations

import datetime
import time
from dataclasses import asdict, dataclass

import torch

from training.gpus import gpu_for_device_name
from training.records import format_record

def datasheet_peak_tflops(device_name: str) -> float | None:
    """Dense bf16 peak (training/gpus.py) of a CUDA device name such as 'NVIDIA H200'; None if unknown
    or without bf16 tensor cores (T4)."""
    gpu = gpu_for_device_name(device_name)
    return gpu.bf16_tflops if gpu and gpu.native_bf16 else None


def count_params(model: torch.nn.Module, exclude_embedding: bool = False) -> int:
    """Parameters (named_parameters yields a tied embedding once); meta and sharded tensors count their full size."""
    return sum(p.numel() for name, p in model.named_parameters() if not (exclude_embedding and "embed_tokens" in name))


def flops_per_token(n_params: int, n_layers: int, n_heads: int, head_dim: int, seq_len: int) -> float:
    """Training FLOPs per token, torchtitan's count.

    6N: each parameter does one multiply-add (2 FLOPs) in forward and two in backward.
    12*L*H*Q*T: attention scores and the weighted sum (QK^T and AV: 2 matmuls x 2 FLOPs) per
    layer L, head H, head dim Q, over T = seq_len keys, times 3 for forward + backward.
    Causal masking halves the real work; like torchtitan we do not discount it.
    Activation recomputation is not counted: MFU measures useful work.
    """
    return 6 * n_params + 12 * n_layers * n_heads * head_dim * seq_len


def model_flops_per_token(model: torch.nn.Module, seq_len: int) -> float:
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    # The input embedding is a lookup, not a matmul; a tied lm_head still is one and counts via 6N.
    n_params = count_params(model, exclude_embedding=not config.tie_word_embeddings)
    return flops_per_token(n_params, config.num_hidden_layers, config.num_attention_heads, head_dim, seq_len)


def mfu(tokens_per_s_per_gpu: float, flops_per_tok: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over the peak, as a fraction."""
    return tokens_per_s_per_gpu * flops_per_tok / (peak_tflops * 1e12)


def rates(tokens_per_step_per_gpu: int, step_time_s: float, flops_per_tok: float,
          peak_tflops: float | None) -> tuple[float, float, float | None]:
    """(tokens/s per GPU, TFLOP/s per GPU, MFU or None without a peak) of one step's timing."""
    tps = tokens_per_step_per_gpu / step_time_s
    return tps, tps * flops_per_tok / 1e12, mfu(tps, flops_per_tok, peak_tflops) if peak_tflops else None


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return 0.0


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class StepStats:
    time: str
    """UTC time the step was measured (ISO 8601)."""
    step: int
    steps: int
    loss: float
    lr: float
    grad_norm: float
    tokens_per_s_per_gpu: float
    tflops_per_gpu: float
    mfu: float | None
    peak_mem_gib: float
    step_time_s: float
    eta_s: float
    val_loss: float | None = None
    """Mean loss over the validation targets, on the steps that evaluate."""
    val_ppl: float | None = None
    """exp(val_loss): validation perplexity."""
    padding: float | None = None
    """Share of the tokens since the last line that were padding (tokens/s and MFU count the rest)."""
    truncated: int | None = None
    """Chats since the last line cut at --seq-len (their tail is not learned)."""
    unlearned: int | None = None
    """Documents since the last line with no token to learn (e.g. a reply wholly past --seq-len)."""
    empty_blocks: int | None = None
    """Blocks since the last line with no learned token at all (they cost compute, teach nothing)."""

    def record(self) -> str:
        """One JSON line for machines: the same figures, full precision (metrics.jsonl, the watcher)."""
        return format_record(self.fields())

    def fields(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "mfu"}

    def line(self) -> str:
        mfu = f" mfu {self.mfu * 100:5.1f}%" if self.mfu is not None else ""
        mem = f" mem {self.peak_mem_gib:5.1f}GiB" if self.peak_mem_gib else ""
        val = f" | val {self.val_loss:7.4f} ppl {self.val_ppl:,.2f}" if self.val_loss is not None else ""
        data = (f" | pad {self.padding * 100:4.1f}% trunc {self.truncated} unlearned {self.unlearned} "
                f"empty {self.empty_blocks}") if self.padding is not None else ""
        return (
            f"{self.time} step {self.step:>5}/{self.steps} | loss {self.loss:7.4f}{val} | lr {self.lr:.2e} | "
            f"gnorm {self.grad_norm:6.3f} | {self.tokens_per_s_per_gpu:9,.0f} tok/s/gpu | "
            f"{self.tflops_per_gpu:7.2f} TFLOP/s/gpu{mfu}{mem} | {self.step_time_s * 1000:7.1f} ms/step | "
            f"eta {_duration(self.eta_s)}{data}"
        )


def _duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class Throughput:
    """Wall time between logged steps, on the host: each step returns once its own numbers are read
    (training.step.train_step), so steps run back to back at the GPU's pace.

    start_step: the step the run starts from (a resumed run's restored step), so that the first
    measurement divides by the steps this process ran, not by all steps since step 0.
    """

    def __init__(self, tokens_per_step_per_gpu: int, flops_per_tok: float, peak_tflops: float | None,
                 start_step: int = 0) -> None:
        self.tokens_per_step = tokens_per_step_per_gpu
        self.flops_per_tok = flops_per_tok
        self.peak_tflops = peak_tflops
        self.last_time = time.perf_counter()
        self.last_step = start_step

    def reset(self, step: int) -> None:
        self.last_time, self.last_step = time.perf_counter(), step

    def stats(self, step: int, steps: int, loss: float, lr: float, grad_norm: float, peak_mem: float,
              real_tokens_per_gpu: float | None = None) -> StepStats:
        """Call after a step returned. real_tokens_per_gpu: the tokens that were not padding since the last
        call, per GPU; tokens/s and MFU count those (all tokens when None)."""
        now = time.perf_counter()
        elapsed = max(now - self.last_time, 1e-9)
        steps_done = max(step - self.last_step, 1)
        step_time = elapsed / steps_done
        self.last_time, self.last_step = now, step
        per_step = self.tokens_per_step if real_tokens_per_gpu is None else real_tokens_per_gpu / steps_done
        tps, tflops, utilisation = rates(per_step, step_time, self.flops_per_tok, self.peak_tflops)
        return StepStats(
            time=utc_now(), step=step, steps=steps, loss=loss, lr=lr, grad_norm=grad_norm,
            tokens_per_s_per_gpu=tps, tflops_per_gpu=tflops,
            mfu=utilisation,
            peak_mem_gib=peak_mem, step_time_s=step_time, eta_s=step_time * (steps - step),
        )


def step_record(throughput: Throughput, step: int, steps: int, loss: float, lr: float, grad_norm: float, peak_mem: float,
                data: dict[str, int], world: int, counted: bool) -> StepStats:
    """The step's record from `data`, the counts summed over the `world` workers since the last record
    (DataCounts.take): tokens/s, TFLOP/s and MFU per GPU count one GPU's share of the real tokens; with `counted`
    data (not synthetic), the padding share and the truncated, unlearned and empty counts since the last record."""
    stats = throughput.stats(step, steps, loss, lr, grad_norm, peak_mem, real_tokens_per_gpu=data["real_tokens"] / world)
    if counted:
        stats.padding = 1 - data["real_tokens"] / max(data["tokens"], 1)
        stats.truncated, stats.unlearned, stats.empty_blocks = data["truncated"], data["unlearned"], data["empty_blocks"]
    return stats


class DataCounts:
    """What the training data really held, counted as micro-batches are drawn: tokens, tokens that
    were not padding, truncated chats, documents and blocks with nothing to learn. This worker's counts
    are drained into each step (train_step's count), which sums them over the workers in its own
    collective and hands them back (add); take() returns the sums since its last call, with no collective."""

    FIELDS = ("tokens", "real_tokens", "truncated", "unlearned", "empty_blocks")

    def __init__(self) -> None:
        self.local = dict.fromkeys(self.FIELDS, 0)
        self.since = dict.fromkeys(self.FIELDS, 0)
        self.total = dict.fromkeys(self.FIELDS, 0)

    def counted(self, batches):
        """The same micro-batches, counted on the way (synthetic data has no padding and no counts)."""
        from training.loss import IGNORE_INDEX

        for batch in batches:
            labels = batch["labels"]
            tokens = labels.numel()
            self.local["tokens"] += tokens
            self.local["real_tokens"] += int(batch["real_tokens"].sum()) if "real_tokens" in batch else tokens
            self.local["truncated"] += int(batch["truncated"].sum()) if "truncated" in batch else 0
            self.local["unlearned"] += int(batch["unlearned"].sum()) if "unlearned" in batch else 0
            self.local["empty_blocks"] += int(((labels != IGNORE_INDEX).sum(dim=1) == 0).sum())
            yield batch

    def drain(self) -> list[int]:
        """This worker's counts since the last drain, in FIELDS order (for train_step to sum over workers)."""
        drained = [self.local[k] for k in self.FIELDS]
        self.local = dict.fromkeys(self.FIELDS, 0)
        return drained

    def add(self, sums) -> None:
        """Counts summed over every worker (a step's StepResult.sums)."""
        for k, v in zip(self.FIELDS, sums, strict=True):
            self.since[k] += int(v)
            self.total[k] += int(v)

    def take(self) -> dict[str, int]:
        """The summed counts added since the last take."""
        taken, self.since = self.since, dict.fromkeys(self.FIELDS, 0)
        return taken
