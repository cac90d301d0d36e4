"""The health gate: before the first step, every node proves its GPUs and its link to every other node.

A node below threshold fails the attempt on every rank, naming the node and its figures, so the job's
retry (KubeRay's backoffLimit) starts on a fresh cluster instead of training slowly or hanging there.
Thresholds are half the datasheet or planned figure: a healthy part reaches well above that, a broken
one (a GPU stuck at a low clock, a link fallen back from EFA to TCP) well below.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist

BUDGET_S = 60.0
"""The gate's whole time, every check on every node (issue 32)."""
MIN_SHARE = 0.5
"""Matmul and link must reach this share of the datasheet or planned figure."""
MEMORY_SHARE = 0.9
"""Device memory must be at least this share of the datasheet's..."""
FREE_SHARE = 0.9
"""...and this share of it free before the model is built."""
MATMUL_N = 4096
MATMUL_REPEATS = 10
PATTERN_BYTES = 256 * 2**20


class HealthError(RuntimeError):
    """A node failed the gate; the message names it and its figures."""


@dataclass
class GpuFigures:
    node: str
    rank: int
    device: str
    tflops: float
    memory_gb: float
    free_share: float
    pattern_ok: bool
    failures: list[str] = field(default_factory=list)


@dataclass
class LinkFigures:
    nodes: tuple[str, str]
    message_bytes: int
    all_reduce_gbps: float
    all_gather_gbps: float


def node_name() -> str:
    """The Kubernetes node's name where the pod passes it (NODE_NAME, from the downward API), else the host's."""
    return os.environ.get("NODE_NAME") or socket.gethostname()


def datasheet_for(device_name: str) -> tuple[str, float, float] | None:
    """(GPU model, dense bf16 TFLOP/s, memory GB) from the datasheet table (training/gpus.py) for a CUDA device name
    such as 'NVIDIA L4' or 'NVIDIA A100-SXM4-40GB'."""
    from training.gpus import gpu_for_device_name

    spec = gpu_for_device_name(device_name)
    return (spec.name, spec.bf16_tflops, spec.memory_gb) if spec else None


def check_gpu(device: torch.device, node: str, rank: int) -> GpuFigures:
    """Time a bf16 matmul, read the device's memory and check a write/read pattern, against the datasheet."""
    name = torch.cuda.get_device_name(device)
    sheet = datasheet_for(name)
    a = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=torch.bfloat16)
    torch.matmul(a, b)  # the first call picks the kernel
    torch.cuda.synchronize(device)
    started = time.perf_counter()
    for _ in range(MATMUL_REPEATS):
        torch.matmul(a, b)
    torch.cuda.synchronize(device)
    tflops = 2 * MATMUL_N**3 * MATMUL_REPEATS / (time.perf_counter() - started) / 1e12
    del a, b
    free, total = torch.cuda.mem_get_info(device)
    figures = GpuFigures(node, rank, name, round(tflops, 1), round(total / 1e9, 2), round(free / total, 3),
                         pattern_ok=memory_pattern_ok(device))
    figures.failures = gpu_failures(figures, sheet)
    return figures


def memory_pattern_ok(device: torch.device, size_bytes: int = PATTERN_BYTES) -> bool:
    """Write a position-dependent pattern and its complement, and read each back."""
    words = torch.arange(size_bytes // 4, device=device, dtype=torch.int32)
    for pattern in (0x5A5A5A5A, ~0x5A5A5A5A):
        written = words ^ pattern
        if not torch.equal(written ^ pattern, words):
            return False
    return True


def gpu_failures(figures: GpuFigures, sheet: tuple[str, float, float] | None) -> list[str]:
    """What falls short of the thresholds; a GPU this table does not know is held to the pattern and free memory only."""
    failures = []
    if sheet is not None:
        model, tflops, memory_gb = sheet
        if figures.tflops < MIN_SHARE * tflops:
            failures.append(f"bf16 matmul {figures.tflops:.1f} TFLOP/s < {MIN_SHARE * tflops:.1f} "
                            f"({MIN_SHARE:g} x the {model}'s {tflops:g})")
        if figures.memory_gb < MEMORY_SHARE * memory_gb:
            failures.append(f"memory {figures.memory_gb:.1f} GB < {MEMORY_SHARE * memory_gb:.1f} "
                            f"({MEMORY_SHARE:g} x the {model}'s {memory_gb:g} GB)")
    if figures.free_share < FREE_SHARE:
        failures.append(f"only {figures.free_share:.0%} of memory free (< {FREE_SHARE:.0%}: another process holds it)")
    if not figures.pattern_ok:
        failures.append(f"memory pattern check failed on {PATTERN_BYTES // 2**20} MiB")
    return failures


def timed_all_reduce(tensor: torch.Tensor, group) -> None:
    dist.all_reduce(tensor, group=group)


def timed_all_gather(output: torch.Tensor, tensor: torch.Tensor, group) -> None:
    dist.all_gather_into_tensor(output, tensor, group=group)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_pair(pair: tuple[str, str], group, message_bytes: int, device: torch.device) -> LinkFigures:
    """One all-reduce and one all-gather of a layer's bf16 message between two nodes' first ranks, after one
    untimed warm-up (which builds the connection). Bus bandwidth as nccl-tests counts it: for two ranks
    an all-reduce moves the message once each way, an all-gather half the output."""
    elements = max(message_bytes // 2, 2)
    tensor = torch.ones(elements, dtype=torch.bfloat16, device=device)
    gathered = torch.empty(2 * elements, dtype=torch.bfloat16, device=device)
    dist.all_reduce(tensor, group=group)
    _synchronize(device)
    started = time.perf_counter()
    timed_all_reduce(tensor, group)
    _synchronize(device)
    reduce_s = time.perf_counter() - started
    started = time.perf_counter()
    timed_all_gather(gathered, tensor[: elements], group)
    _synchronize(device)
    gather_s = time.perf_counter() - started
    size = elements * 2
    return LinkFigures(pair, size, round(size / reduce_s / 1e9, 3), round(size / gather_s / 1e9, 3))


def link_failures(links: list[LinkFigures], predicted_gbps: float | None) -> list[str]:
    """The slow node named from the pairs below threshold: the node common to every slow pair (with two nodes,
    both: their one link cannot tell which end is slow); without a prediction nothing fails."""
    if predicted_gbps is None:
        return []
    floor = MIN_SHARE * predicted_gbps
    slow = [link for link in links if min(link.all_reduce_gbps, link.all_gather_gbps) < floor]
    if not slow:
        return []
    common = set(slow[0].nodes).intersection(*(set(link.nodes) for link in slow[1:]))
    suspects = sorted(common or {node for link in slow for node in link.nodes})
    figures = "; ".join(f"{a}<->{b} all-reduce {link.all_reduce_gbps:g} GB/s, all-gather {link.all_gather_gbps:g} GB/s"
                        for link in slow for a, b in [link.nodes])
    return [f"node {' or '.join(suspects)}: link below {floor:g} GB/s ({MIN_SHARE:g} x the planned "
            f"{predicted_gbps:g} GB/s): {figures}"]


def check_links(node_of_rank: list[str], rank: int, message_bytes: int, device: torch.device) -> list[LinkFigures]:
    """Each pair of nodes, one pair at a time, between the nodes' first ranks; every rank gets every pair's figures."""
    leaders: dict[str, int] = {}
    for r, node in enumerate(node_of_rank):
        leaders.setdefault(node, r)
    nodes = list(leaders)
    measured = []
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            group = dist.new_group([leaders[a], leaders[b]])  # every rank creates every group, in one order
            if rank in (leaders[a], leaders[b]):
                measured.append(measure_pair((a, b), group, message_bytes, device))
            dist.barrier()  # pairs one after another: none shares the network with another's measure
    gathered: list = [None] * len(node_of_rank)
    dist.all_gather_object(gathered, measured)
    slowest: dict[tuple, LinkFigures] = {}  # both ends time the pair; the slower reading stands
    for link in (link for part in gathered for link in part):
        seen = slowest.setdefault(link.nodes, link)
        slowest[link.nodes] = LinkFigures(link.nodes, link.message_bytes, min(seen.all_reduce_gbps, link.all_reduce_gbps),
                                          min(seen.all_gather_gbps, link.all_gather_gbps))
    return list(slowest.values())


def layer_message_bytes(model_config) -> int:
    """One decoder layer's linear weights in bf16: what FSDP gathers for it, and the size of its gradient."""
    hidden = model_config.hidden_size
    heads = model_config.num_attention_heads
    head_dim = getattr(model_config, "head_dim", None) or hidden // heads
    kv_heads = getattr(model_config, "num_key_value_heads", None) or heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    return 2 * (attention + 3 * hidden * model_config.intermediate_size)


def run_gate(rank: int, device: torch.device, message_bytes: int, predicted_link_gbps: float | None,
             log=print, budget_s: float = BUDGET_S) -> dict:
    """Every rank calls it. Returns the figures for the run summary; raises HealthError on every rank
    when any node is below threshold (or the gate ran past its budget)."""
    started = time.perf_counter()
    node = node_name()
    if device.type == "cuda":
        gpu = asdict(check_gpu(device, node, rank))
    else:
        gpu = None
        if rank == 0:
            log("health gate: GPU check skipped (CPU workers)")
    node_of_rank: list = [None] * dist.get_world_size()
    dist.all_gather_object(node_of_rank, node)
    links = check_links(node_of_rank, rank, message_bytes, device)
    gpus: list = [None] * dist.get_world_size()
    dist.all_gather_object(gpus, gpu)
    failures = [f"node {g['node']} rank {g['rank']} ({g['device']}): {'; '.join(g['failures'])}"
                for g in gpus if g and g["failures"]]
    failures += link_failures(links, predicted_link_gbps)
    elapsed = time.perf_counter() - started
    if elapsed > budget_s:
        failures.append(f"the gate took {elapsed:.1f} s, over its {budget_s:g} s budget")
    result = {"gate_s": round(elapsed, 2), "predicted_link_gbps": predicted_link_gbps,
              "links": [asdict(link) for link in links], "gpus": [g for g in gpus if g]}
    if failures:
        raise HealthError("health gate failed: " + " | ".join(failures)
                          + " (the attempt stops so the retry starts on fresh nodes; README: keeping a bad node out)")
    if rank == 0:
        log(health_line(result))
    return result


def health_line(result: dict) -> str:
    links = result["links"]
    link = ("one node: no link to measure" if not links else
            ", ".join(f"{'<->'.join(x['nodes'])} all-reduce {x['all_reduce_gbps']:g} GB/s, all-gather "
                      f"{x['all_gather_gbps']:g} GB/s" for x in links)
            + (f" (planned {result['predicted_link_gbps']:g} GB/s)" if result["predicted_link_gbps"] else ""))
    gpus = result["gpus"]
    gpu = (f"{len(gpus)} GPU(s), bf16 matmul {min(g['tflops'] for g in gpus):g}-{max(g['tflops'] for g in gpus):g} "
           "TFLOP/s" if gpus else "GPUs not checked (CPU)")
    return f"health gate: passed in {result['gate_s']:g} s: {gpu}; {link}"


def gate_for_run(cfg, rank: int, device: torch.device, log) -> dict:
    """The gate at the run's model's layer size and the planner's link figure (TrainConfig)."""
    from training.model import model_config

    return run_gate(rank, device, layer_message_bytes(model_config(cfg)), cfg.predicted_link_gbps, log)
