"""What a run is, to the planner: the model's shape (parameters, FLOPs per token), the per-GPU step
(Workload), the nodes (Cluster, from planning/hardware.py) and the sharding layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from training.config import RECOMPUTATION
from planning.hardware import INSTANCE_TYPES
from training.gpus import GpuSpec


SHARDINGS = ("full", "hybrid")
REDUCE_DTYPES = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class ModelShape:
    """Parameter counts of a decoder-only model (a tied embedding counted once)."""

    name: str
    layer_params: int
    """All decoder layers together."""
    root_params: int
    """What the root FSDP unit holds: the (tied) embedding and the final norm."""
    layers: int
    hidden: int
    heads: int
    head_dim: int
    vocab: int
    linear_in_out: int = 0
    """One decoder layer's linear layers, input plus output features summed: a rank-r LoRA adapter
    on each (peft's all-linear) has r x this many parameters per layer."""

    @property
    def params(self) -> int:
        return self.layer_params + self.root_params

    def trained_params(self, lora_rank: int) -> int:
        """What the optimizer updates: every weight, or LoRA's adapters (all-linear) alone."""
        return lora_rank * self.linear_in_out * self.layers if lora_rank else self.params

    def flops_per_token(self, seq_len: int) -> float:
        """6N + 12 L H Q T, as training.metrics counts it (torchtitan's convention)."""
        return 6 * self.params + 12 * self.layers * self.heads * self.head_dim * seq_len


# Counted on the built-in configurations (training.model.builtin_config; Qwen2.5-14B's published config).
MODELS = {
    "qwen2.5-1.5b": ModelShape("qwen2.5-1.5b", layer_params=1_310_339_072, root_params=233_375_232, layers=28,
                               hidden=1536, heads=12, head_dim=128, vocab=151936, linear_in_out=41_216),
    "qwen2.5-7b": ModelShape("qwen2.5-7b", layer_params=6_525_618_176, root_params=1_089_998_336, layers=28,
                             hidden=3584, heads=28, head_dim=128, vocab=152064, linear_in_out=90_112),
    "qwen2.5-14b": ModelShape("qwen2.5-14b", layer_params=13_212_893_184, root_params=1_557_140_480, layers=48,
                              hidden=5120, heads=40, head_dim=128, vocab=152064, linear_in_out=89_600),
    "tiny": ModelShape("tiny", layer_params=74_240, root_params=32_832, layers=2, hidden=64, heads=4, head_dim=16, vocab=512,
                       linear_in_out=1024),
}


@dataclass(frozen=True)
class Workload:
    """The per-GPU shape of a step, as the trainer's options set it."""

    seq_len: int = 2048
    micro_batch: int = 1
    grad_accum: int = 4
    activation_checkpointing: str = "full"
    """none, selective (every SELECTIVE_EVERY-th decoder layer) or full; True and False, as recorded runs
    and the calibration's keys have it, mean full and none."""
    loss_chunk_tokens: int = 2048
    steps: int = 200
    lora_rank: int = 0
    """0: full fine-tuning; else LoRA adapters of this rank on every linear layer, the base frozen in bf16."""

    def __post_init__(self) -> None:
        ac = self.activation_checkpointing
        if isinstance(ac, bool):
            object.__setattr__(self, "activation_checkpointing", "full" if ac else "none")
        elif ac not in RECOMPUTATION:
            raise ValueError(f"activation_checkpointing: {ac!r} is not one of {', '.join(RECOMPUTATION)}")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.micro_batch * self.grad_accum


@dataclass(frozen=True)
class Cluster:
    gpu: GpuSpec
    nodes: int
    gpus_per_node: int
    inter_node_gbps: float
    """GB/s one way through each node's network (all its GPUs share it)."""
    usd_per_hour: float = 0.0
    """All nodes together."""
    name: str = ""

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


def cluster_of(instance_type: str, nodes: int) -> Cluster:
    spec = INSTANCE_TYPES[instance_type]
    return Cluster(gpu=spec.gpu, nodes=nodes, gpus_per_node=spec.gpus, inter_node_gbps=spec.network_gbps,
                   usd_per_hour=spec.usd_per_hour * nodes, name=f"{nodes} x {instance_type}")


@dataclass(frozen=True)
class Layout:
    sharding: str = "full"
    keep_gathered: bool = False
    reduce_dtype: str = "fp32"
    root_regathered: bool = False
    """The root gathered again before every micro-batch, as the trainer did until 2026-12-02 (training.step now
    keeps it gathered until the step's last backward); the benchmark runs recorded before then measured that."""

    @property
    def name(self) -> str:
        return self.sharding + ("+gathered" if self.keep_gathered else "") + ("+bf16" if self.reduce_dtype == "bf16" else "")


ALL_LAYOUTS = tuple(Layout(s, k, r) for s in SHARDINGS for k in (False, True) for r in REDUCE_DTYPES)


def shape_of(config) -> ModelShape:
    """A Hugging Face decoder config's shape: parameters counted on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in lm.parameters())
    layers = sum(p.numel() for p in lm.model.layers.parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    linear = sum(m.in_features + m.out_features for m in lm.model.layers[0].modules() if isinstance(m, torch.nn.Linear))
    return ModelShape(getattr(config, "name_or_path", "") or "model", layer_params=layers, root_params=total - layers,
                      layers=config.num_hidden_layers, hidden=config.hidden_size, heads=config.num_attention_heads,
                      head_dim=head_dim, vocab=config.vocab_size, linear_in_out=linear)
