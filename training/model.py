"""Model construction and FSDP2 wiring.

The model is built on the meta device, wrapped, sharded, then materialised on the target
device; its full weights enter from rank 0 alone (broadcast), so no worker other than rank 0
ever holds a full copy: memory-frugal loading of pretrained weights, and random init that is
identical whatever the world size.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter
from torch.distributed.tensor import DTensor, distribute_tensor

from training.config import ATTENTIONS, MODEL_MAX_POSITIONS, SELECTIVE_EVERY, ConfigError, TrainConfig
from training.families import supported_architecture
from training.fp8 import check_fp8_device, convert_to_fp8
from training.loss import LogitHead, linear_cross_entropy

# The decoder-only families (config.json's model_type) whose loss the fused head is checked against
# transformers' own forward(labels=...) (tests/training/test_model_families.py). Each one's head: hidden @ W, and
# then what transformers 5.23's *ForCausalLM.forward does to the logits (a bias is read from lm_head).
LOGIT_HEADS = {
    "qwen2": lambda c: LogitHead(), "qwen3": lambda c: LogitHead(), "llama": lambda c: LogitHead(),
    "mistral": lambda c: LogitHead(), "gemma": lambda c: LogitHead(), "phi": lambda c: LogitHead(),
    "phi3": lambda c: LogitHead(), "olmo": lambda c: LogitHead(), "olmo2": lambda c: LogitHead(),
    "stablelm": lambda c: LogitHead(), "starcoder2": lambda c: LogitHead(), "glm": lambda c: LogitHead(),
    "granite": lambda c: LogitHead(multiplier=1.0 / c.logits_scaling),
    "cohere": lambda c: LogitHead(multiplier=c.logit_scale), "cohere2": lambda c: LogitHead(multiplier=c.logit_scale),
    "gemma2": lambda c: LogitHead(softcap=c.final_logit_softcapping),
    "gemma3_text": lambda c: LogitHead(softcap=c.final_logit_softcapping),
}


def check_architecture(config) -> None:
    """ConfigError (one line, naming --model) when the trainer does not train this Hugging Face config."""
    refusal = supported_architecture(config.to_dict())
    if refusal:
        raise ConfigError(f"--model: {refusal}")


def builtin_config(name: str):
    from transformers import Qwen2Config

    if name == "qwen2.5-1.5b":
        # Qwen2.5-1.5B's published architecture: 1,543,714,304 parameters.
        return Qwen2Config(
            vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
            num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=MODEL_MAX_POSITIONS[name],
            rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        )
    if name == "qwen2.5-7b":
        # Qwen2.5-7B's published architecture: 7,615,616,512 parameters, embedding and head untied.
        return Qwen2Config(
            vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
            num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=MODEL_MAX_POSITIONS[name],
            rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
        )
    if name == "qwen2.5-14b":
        # Qwen2.5-14B's published architecture: 14,770,033,664 parameters, embedding and head untied.
        return Qwen2Config(
            vocab_size=152064, hidden_size=5120, intermediate_size=13824, num_hidden_layers=48,
            num_attention_heads=40, num_key_value_heads=8, max_position_embeddings=MODEL_MAX_POSITIONS[name],
            rope_theta=1_000_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        )
    if name == "tiny":
        return Qwen2Config(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MODEL_MAX_POSITIONS[name],
            rope_theta=10_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        )
    return None


def model_config(cfg: TrainConfig):
    from transformers import AutoConfig

    from training.storage import local_model_path

    config = builtin_config(cfg.model) or AutoConfig.from_pretrained(local_model_path(cfg.model, cfg.cache_dir),
                                                                     cache_dir=cfg.cache_dir, revision=cfg.model_revision)
    check_architecture(config)
    check_attention(cfg, config)
    return config


class CausalLMWithLoss(nn.Module):
    """A Hugging Face causal LM whose forward returns the (scaled) summed next-token loss.

    The head and the loss are fused (training.loss): the logits of a 151,936-token vocabulary
    never exist for more than one chunk of tokens at a time.
    """

    def __init__(self, lm: nn.Module, loss_chunk_tokens: int = 8192) -> None:
        super().__init__()
        check_architecture(lm.config)
        self.lm = lm
        self.loss_chunk_tokens = loss_chunk_tokens
        self.logit_head = LOGIT_HEADS[lm.config.model_type](lm.config)

    @property
    def config(self):
        return self.lm.config

    @property
    def decoder_layers(self) -> nn.ModuleList:
        return self.lm.model.layers

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, position_ids: torch.Tensor | None = None,
                scale: torch.Tensor | float = 1.0) -> torch.Tensor:
        """scale x the next-token loss summed over the valid targets (labels other than IGNORE_INDEX).

        position_ids that restart at 0 mark the documents packed into a block: each attends only to
        itself (none: plain causal attention).
        """
        if getattr(self.lm.config, "layer_types", None) is None:  # a model whose forward takes no prepared masks
            hidden = self.lm.model(input_ids=input_ids, position_ids=position_ids, use_cache=False).last_hidden_state
        else:
            embeds = self.lm.model.embed_tokens(input_ids)
            masks = attention_masks(self.lm.config, embeds, position_ids)
            hidden = self.lm.model(inputs_embeds=embeds, attention_mask=masks, position_ids=position_ids,
                                   use_cache=False).last_hidden_state
        hidden = hidden.reshape(-1, hidden.shape[-1])
        head = self.lm.lm_head
        return linear_cross_entropy(hidden, head.weight, labels.reshape(-1), self.loss_chunk_tokens, scale,
                                    bias=head.bias, head=self.logit_head)


def attention_masks(config, embeds: torch.Tensor, position_ids: torch.Tensor | None) -> dict:
    """transformers' attention mask for each kind of layer, built here so that its packed-sequence check is
    skipped: that check (masking_utils.find_packed_sequence_indices) reads the positions back to the host, so
    every forward would wait for the GPU to finish all its queued work, once a micro-batch. Without positions:
    plain causal attention. With them: a position that does not follow its left neighbour starts a document
    (transformers' rule), and a token attends only to the earlier tokens of its own document. Models whose
    config lists layer_types (Qwen2 and the like) take such a mapping; others build their own masks."""
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    same_document = None
    if position_ids is not None:
        positions = position_ids.expand(embeds.shape[0], -1)
        document = (torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1) != 1).cumsum(-1)

        def same_document(batch, head, q, kv):
            return document[batch, q] == document[batch, kv]

    makers = {"full_attention": create_causal_mask, "sliding_attention": create_sliding_window_causal_mask}
    return {kind: makers[kind](config=config, inputs_embeds=embeds, attention_mask=None, past_key_values=None,
                               and_mask_function=same_document) for kind in set(config.layer_types)}


def lora_config(cfg: TrainConfig, config=None):
    """peft's LoraConfig of the run's adapters (None: full fine-tuning). With `config`, named target
    modules are checked against its decoder layers' linear layers (ConfigError naming them)."""
    if cfg.lora_rank == 0:
        return None
    from peft import LoraConfig

    from training.config import LORA_ALL_LINEAR, ConfigError

    targets = cfg.lora_target_modules
    if config is not None and targets != LORA_ALL_LINEAR:
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            layer = AutoModelForCausalLM.from_config(config).model.layers[0]
        linear = [name.rsplit(".", 1)[-1] for name, m in layer.named_modules() if isinstance(m, nn.Linear)]
        unknown = [t for t in targets.split(",") if t not in linear]
        if unknown:
            raise ConfigError(f"--lora-target-modules: {', '.join(unknown)} not among the linear layers of "
                              f"{config.model_type}'s decoder layers ({', '.join(linear)})")
    return LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets if targets == LORA_ALL_LINEAR else targets.split(","))


def add_lora(lm: nn.Module, lora) -> None:
    """peft's adapters injected in place (module names keep the Hugging Face layout, which
    CausalLMWithLoss relies on); every other weight is frozen and stored in bf16."""
    from peft import inject_adapter_in_model

    inject_adapter_in_model(lora, lm)
    for param in lm.parameters():
        if not param.requires_grad:
            param.data = param.data.to(torch.bfloat16)  # in place: the tied embedding stays one parameter


def full_state_dict_on_rank0(cfg: TrainConfig, config) -> dict[str, torch.Tensor]:
    """Rank 0's full fp32 weights: pretrained from the hub/path, or seeded random init; with LoRA,
    the adapters added (with_adapters)."""
    from transformers import AutoModelForCausalLM

    if builtin_config(cfg.model) is None:
        from training.storage import local_model_path

        lm = AutoModelForCausalLM.from_pretrained(
            local_model_path(cfg.model, cfg.cache_dir), cache_dir=cfg.cache_dir, revision=cfg.model_revision,
            dtype=torch.float32, low_cpu_mem_usage=True)
    else:
        torch.manual_seed(cfg.seed)
        lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = {f"lm.{k}": v for k, v in lm.state_dict().items()}
    return with_adapters(state, cfg, config) if cfg.lora_rank else state


def with_adapters(state: dict[str, torch.Tensor], cfg: TrainConfig, config) -> dict[str, torch.Tensor]:
    """A base model's full state with the run's LoRA adapters, named as the adapted model names
    them, in peft's seeded initialisation (B = 0: training starts from the base model). The base
    tensors are shared, not copied (the benchmark reuses one base for several cases)."""
    from peft import inject_adapter_in_model
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    lm.load_state_dict({k.removeprefix("lm."): v for k, v in state.items()}, assign=True)
    lm.tie_weights()
    torch.manual_seed(cfg.seed)
    inject_adapter_in_model(lora_config(cfg), lm)
    return {f"lm.{k}": v for k, v in lm.state_dict().items()}


def attention_kernel(cfg: TrainConfig, device: torch.device, config=None) -> str:
    """transformers' attention implementation. auto: flex attention for real data on GPU, where packed
    documents make SDPA fall back to a masked kernel (-21% tokens/s at 8 x 4096 on H200, while flex
    runs +7% faster than plain causal SDPA: docs/benchmarks.md); SDPA for synthetic data and on CPU. A kernel
    the model's class refuses is skipped (StableLM has no flex attention; Gemma 2 no SDPA, which has no
    attention soft cap): then SDPA, then eager."""
    from training.config import SYNTHETIC_DATA

    if cfg.attention == "auto":
        preferred = ("flex_attention",) if device.type == "cuda" and cfg.data not in SYNTHETIC_DATA else ()
        for kernel in (*preferred, "sdpa"):
            if config is None or supports_kernel(config, kernel):
                return kernel
        return "eager"
    return ATTENTIONS[cfg.attention]


# The class attribute by which transformers 5.23 refuses a kernel (modeling_utils: _check_and_adjust_attn_implementation).
_KERNEL_SUPPORT = {"sdpa": "_supports_sdpa", "flex_attention": "_supports_flex_attn"}


def supports_kernel(config, kernel: str) -> bool:
    from transformers import AutoModelForCausalLM

    return bool(getattr(AutoModelForCausalLM._model_mapping[type(config)], _KERNEL_SUPPORT[kernel], True))


def check_attention(cfg: TrainConfig, config) -> None:
    """ConfigError (one line, naming --attention) when the chosen kernel is one the model's class refuses."""
    kernel = ATTENTIONS.get(cfg.attention)
    if kernel and not supports_kernel(config, kernel):
        raise ConfigError(f"--attention: {config.model_type} models have no {cfg.attention} attention in transformers; "
                          f"use auto (it picks one they have)")


def checkpointed_layers(layers: int, recomputation: str) -> list[int]:
    """Indices of the decoder layers that recompute their forward in backward. full: all; none: none;
    selective: every SELECTIVE_EVERY-th (the 2nd, 4th, ...), as torchtitan's layer-level selective AC counts
    at that frequency. Whole layers rather than chosen ops inside them: memory and recomputation then fall
    halfway between none and full, layer for layer, which is what planning.plan's memory and time model rest on."""
    if recomputation == "full":
        return list(range(layers))
    if recomputation == "selective":
        return [i for i in range(layers) if (i + 1) % SELECTIVE_EVERY == 0]
    if recomputation == "none":
        return []
    raise ValueError(f"activation checkpointing {recomputation!r}: none, selective or full (auto is resolved before the "
                     "model is built: planning.auto resolves it before the trainer starts)")


def apply_activation_checkpointing(model: CausalLMWithLoss, recomputation: str) -> None:
    """Wrap the decoder layers that recompute (checkpointed_layers); the wrapper keeps the state dict's names."""
    layers = model.decoder_layers
    for i in checkpointed_layers(len(layers), recomputation):
        layers[i] = checkpoint_wrapper(layers[i])


def apply_compile(model: CausalLMWithLoss) -> None:
    for layer in model.decoder_layers:
        layer.compile()


REDUCE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def device_mesh(device: torch.device, sharding: str, nodes: int, gpus_per_node: int):
    """full: one dimension over every rank. hybrid: (replicate across nodes, shard within a node).

    Ray Train numbers ranks node by node (ranks 0..g-1 on the first node), so row i of the 2-D
    mesh is node i's GPUs: the shard groups stay inside a node, the replicate groups cross nodes.
    """
    from torch.distributed.device_mesh import init_device_mesh

    if sharding == "hybrid":
        return init_device_mesh(device.type, (nodes, gpus_per_node), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device.type, (nodes * gpus_per_node,), mesh_dim_names=("shard",))


class WireDtypeReduceScatter(ReduceScatter):
    """FSDP2's gradient reduce-scatter with the bytes on the link in `wire` (bf16): the gradients
    FSDP hands over, accumulated over micro-batches in fp32, are rounded once for the collective
    and the result is widened back to fp32 before FSDP adds it to the sharded gradient."""

    def __init__(self, wire: torch.dtype) -> None:
        self.wire = wire

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group, op, async_op: bool = False):
        reduced = torch.empty_like(output_tensor, dtype=self.wire)
        dist.reduce_scatter_tensor(reduced, input_tensor.to(self.wire), op=op, group=group)
        output_tensor.copy_(reduced)


def replica_all_reduce(group, wire: torch.dtype):
    """The hybrid layout's cross-node step, as an FSDP2 all-reduce hook: average a unit's reduce-
    scattered gradient shard (fp32) over the replicas on the other nodes, sending `wire` bytes."""
    replicas = dist.get_world_size(group)

    def hook(shard_grad: torch.Tensor) -> None:
        if shard_grad.is_cuda:  # allocated on the reduce-scatter stream, used here on the all-reduce stream
            shard_grad.record_stream(torch.cuda.current_stream(shard_grad.device))
        sent = shard_grad if shard_grad.dtype == wire else shard_grad.to(wire)
        dist.all_reduce(sent, group=group)  # SUM: gloo has no AVG in every release
        shard_grad.copy_(sent).div_(replicas)

    return hook


def apply_fsdp(model: CausalLMWithLoss, device: torch.device, mesh=None, reshard_after_forward: bool = True,
               reduce_dtype: str = "fp32", single_micro_batch: bool = False) -> None:
    """FSDP2: one unit per decoder layer, then the root (embedding, final norm, lm_head).

    The tied embedding and lm_head are one parameter, so they must share a unit: the root.
    On GPU: bf16 compute, fp32 master weights and optimizer state. Gradients always accumulate in
    fp32 over a step's micro-batches (FSDP2 upcasts each micro-batch's bf16 gradient into an fp32
    accumulator when its reduce dtype is fp32); reduce_dtype only sets the bytes on the links:
    with bf16, the reduce-scatter (custom comm) and the cross-node all-reduce (hook) send bf16.
    Hybrid (a 2-D mesh): each node's GPUs form an FSDP group over "shard", and after each unit's
    reduce-scatter a hook averages the gradient shard over "replicate", the same shard on the
    other nodes: one all-reduce per unit and step crosses nodes, as with FSDP2's native HSDP, whose
    all-reduce always runs in the reduce dtype. Replicas stay equal: same weights from rank 0,
    same averaged gradients, same optimizer.
    On CPU (gloo): fp32 compute (torch 2.13 averages gradients on gloo as on NCCL).
    LoRA: a layer's unit holds its frozen bf16 base weights and its trainable fp32 adapters. FSDP2
    requires one original dtype only among a unit's trainable parameters (_fsdp_param_group.py,
    _init_mp_dtypes) and all-gathers mixed dtypes as bytes, so no separate units are needed; only
    the adapters get gradients, and only they are reduced.
    single_micro_batch (grad_accum 1), one mesh dimension: nothing accumulates, so a bf16 wire needs no fp32
    accumulator: FSDP2 reduce-scatters the bf16 gradients as they are (its own reduce dtype), the same sums as
    the custom reduce-scatter gives, without widening every gradient to fp32 and rounding it back each step.
    """
    wire = REDUCE_DTYPES[reduce_dtype] if device.type == "cuda" else torch.float32
    hybrid = mesh is not None and mesh.ndim == 2
    # Not hybrid: FSDP2 calls the all-reduce hook before widening, so the hook's mean over replicas would be
    # rounded to bf16 (exact only for a power-of-two replica count).
    native_wire = single_micro_batch and wire == torch.bfloat16 and not hybrid
    if device.type == "cuda":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=wire if native_wire else torch.float32)
    else:  # fp32 compute: frozen bf16 LoRA base weights are gathered as fp32 (fp32 weights are unchanged)
        mp = MixedPrecisionPolicy(param_dtype=torch.float32)
    shard_mesh = mesh["shard"] if hybrid else mesh
    units = list(model.decoder_layers) + [model]
    for layer in model.decoder_layers:
        fully_shard(layer, mesh=shard_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    # The root's parameters are used last in forward and first in backward: keep them gathered.
    fully_shard(model, mesh=shard_mesh, mp_policy=mp, reshard_after_forward=False)
    for unit in units:
        if wire != torch.float32 and not native_wire:
            unit.set_custom_reduce_scatter(WireDtypeReduceScatter(wire))
        if hybrid:
            unit.set_all_reduce_hook(replica_all_reduce(mesh.get_group("replicate"), wire))


def _reset_non_persistent_buffers(model: CausalLMWithLoss, device: torch.device) -> None:
    """Buffers outside the state dict are garbage after to_empty: rebuild them. Rotary embeddings are built
    from the config; Gemma 3's scaled embedding keeps its factor as a number beside its buffer."""
    for module in model.modules():
        if not getattr(module, "_non_persistent_buffers_set", None):
            continue
        if hasattr(module, "scalar_embed_scale"):
            module._buffers["embed_scale"] = torch.tensor(module.scalar_embed_scale, device=device)
            continue
        fresh = type(module)(config=model.config).to(device)
        for name in module._non_persistent_buffers_set:
            module._buffers[name] = getattr(fresh, name)


def build_model(cfg: TrainConfig, device: torch.device, rank: int, world_size: int,
                full_state: dict[str, torch.Tensor] | None = None, mesh=None) -> CausalLMWithLoss:
    """The sharded, materialised model with rank 0's weights broadcast to every worker.

    full_state: rank 0's full weights when the caller already has them (the benchmark reuses
    one random init across configurations); loaded or initialised here when None.
    mesh: the device mesh of the sharding layout (device_mesh); None shards over every rank.
    """
    from transformers import AutoModelForCausalLM

    if cfg.precision == "fp8":  # refused before any weights load
        check_fp8_device(device)
    config = model_config(cfg)
    if rank != 0:
        full_state = {}
    elif full_state is None:
        full_state = full_state_dict_on_rank0(cfg, config)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=attention_kernel(cfg, device, config))
        lora = lora_config(cfg, config)
        if lora:
            add_lora(lm, lora)
        model = CausalLMWithLoss(lm, cfg.loss_chunk_tokens)
    if cfg.precision == "fp8":  # before recomputation wraps the layers, compilation traces them and FSDP2 shards them
        convert_to_fp8(model)
    apply_activation_checkpointing(model, cfg.activation_checkpointing)
    if cfg.compile and device.type == "cuda":
        apply_compile(model)
    apply_fsdp(model, device, mesh, cfg.reshard_after_forward, cfg.reduce_dtype, single_micro_batch=cfg.grad_accum == 1)
    model.to_empty(device=device)
    _reset_non_persistent_buffers(model, device)
    load_full_state_from_rank0(model, full_state, device, rank)
    return model


def load_full_state_from_rank0(model: nn.Module, full_state: dict[str, torch.Tensor], device: torch.device,
                               rank: int) -> None:
    """Rank 0's full weights to every worker, one tensor at a time; each worker keeps its shard.

    Peak extra memory is one full tensor (the embedding). Plain broadcasts and distribute_tensor
    only: set_model_state_dict's broadcast_from_rank0 breaks on some torch releases (2.11).
    """
    distributed = dist.is_initialized() and dist.get_world_size() > 1
    targets = model.state_dict()
    missing = [sorted(set(targets) - set(full_state)) if rank == 0 else None]
    if distributed:
        dist.broadcast_object_list(missing, src=0)
    if missing[0]:
        raise ValueError(f"rank 0's weights lack {len(missing[0])} of the model's tensors, e.g. {missing[0][0]}")
    with torch.no_grad():
        for name, target in targets.items():
            if rank == 0:
                full = full_state[name].to(device=device, dtype=target.dtype)
            else:
                full = torch.empty(target.shape, dtype=target.dtype, device=device)
            if distributed:
                dist.broadcast(full, src=0)
            if isinstance(target, DTensor):
                target.to_local().copy_(distribute_tensor(full, target.device_mesh, target.placements).to_local())
            else:
                target.copy_(full)
