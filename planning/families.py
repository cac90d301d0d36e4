"""A decoder model's shape from its `config.json` alone: no torch, no transformers, no download.

The synth plans `auto` for any model the trainer accepts, and synth runs without torch. So the
parameter counts transformers would build are counted here from the config's fields, family by family
(each family's modeling file in transformers 5.23 decides which projections carry a bias and how many
norms a layer holds); tests/planning/test_families.py checks every family against transformers' own
model built on the meta device.
"""

from __future__ import annotations

from dataclasses import dataclass


class ShapeError(ValueError):
    """The config does not give what the planner needs; the message says which field."""


@dataclass(frozen=True)
class Family:
    """What one model_type's decoder layer holds beyond the shared attention + MLP."""

    qkv_bias: str = "attention_bias"
    """A config flag, or "always"/"never": whether q, k and v projections carry a bias."""
    o_bias: str = "attention_bias"
    mlp_bias: str = "mlp_bias"
    mlp_matrices: int = 3
    """Gated MLPs (gate, up, down) have three; Phi's fc1/fc2 two."""
    layer_norms: int = 2
    """Norms of hidden_size per layer (Gemma 2 and 3: four; Cohere and parallel-residual StableLM: one)."""
    norm_bias: bool = False
    """LayerNorm with a bias (Phi, StableLM) rather than RMSNorm's weight alone."""
    qk_norm: str = "never"
    """Per-head norms on queries and keys: "head" (head_dim each: Qwen3, Gemma 3), "projection" (the whole
    projection: OLMo 2), "heads" (one per head: Cohere, StableLM), or a config flag naming when."""
    qk_norm_flag: str = ""
    qk_norm_bias: bool = False
    head_bias: bool = False
    """The LM head carries a bias (Phi)."""
    tied_default: bool = False
    """tie_word_embeddings when config.json leaves it out (the config class's default)."""
    fused_qkv: bool = False
    """q, k and v in one linear (Phi-3): the same weights, fewer LoRA targets."""
    fused_gate_up: bool = False
    """gate and up in one linear (Phi-3, GLM)."""
    parametric_norms: bool = True
    """OLMo's layer norms have no weights at all."""


# model_type -> Family, from each family's modeling_<type>.py in transformers 5.23.
FAMILIES: dict[str, Family] = {
    "llama": Family(),
    "mistral": Family(qkv_bias="never", o_bias="never", mlp_bias="never"),
    "qwen2": Family(qkv_bias="always", o_bias="never", mlp_bias="never"),
    "qwen3": Family(mlp_bias="never", qk_norm="head"),
    "gemma": Family(mlp_bias="never", tied_default=True),
    "gemma2": Family(mlp_bias="never", layer_norms=4, tied_default=True),
    "gemma3_text": Family(mlp_bias="never", layer_norms=4, qk_norm="head", tied_default=True),
    "granite": Family(),
    "cohere": Family(mlp_bias="never", layer_norms=1, qk_norm="heads", qk_norm_flag="use_qk_norm", tied_default=True),
    "phi": Family(qkv_bias="always", o_bias="always", mlp_bias="always", mlp_matrices=2, layer_norms=1,
                  norm_bias=True, qk_norm="head", qk_norm_flag="qk_layernorm", qk_norm_bias=True, head_bias=True),
    "phi3": Family(qkv_bias="never", o_bias="never", mlp_bias="never", fused_qkv=True, fused_gate_up=True),
    "olmo": Family(mlp_bias="never", parametric_norms=False),
    "cohere2": Family(mlp_bias="never", layer_norms=1, tied_default=True),
    "starcoder2": Family(qkv_bias="use_bias", o_bias="use_bias", mlp_bias="use_bias", mlp_matrices=2, norm_bias=True,
                         tied_default=True),
    "glm": Family(o_bias="never", mlp_bias="never", fused_gate_up=True),
    "olmo2": Family(mlp_bias="never", qk_norm="projection"),
    "stablelm": Family(qkv_bias="use_qkv_bias", o_bias="never", mlp_bias="never", norm_bias=True,
                       qk_norm="heads", qk_norm_flag="qk_layernorm"),
}


def _field(config: dict, name: str, model: str) -> int:
    value = config.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ShapeError(f"{model}: config.json has no positive integer {name!r} (got {value!r})")
    return value


def _flag(config: dict, rule: str) -> bool:
    return {"always": True, "never": False}.get(rule, bool(config.get(rule, False)))


def count_shape(config: dict, name: str = "model") -> dict:
    """Parameter counts and sizes of the decoder `config` describes, as keyword arguments of the planner's
    ModelShape. ShapeError names the field or family the planner can't count."""
    model_type = config.get("model_type")
    family = FAMILIES.get(model_type)
    if family is None:
        raise ShapeError(f"{name}: model_type {model_type!r} is not one the planner counts ({', '.join(sorted(FAMILIES))})")
    hidden = _field(config, "hidden_size", name)
    layers = _field(config, "num_hidden_layers", name)
    heads = _field(config, "num_attention_heads", name)
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    intermediate = _field(config, "intermediate_size", name)
    vocab = _field(config, "vocab_size", name)
    q_out, kv_out = heads * head_dim, kv_heads * head_dim

    qkv_bias, o_bias, mlp_bias = _flag(config, family.qkv_bias), _flag(config, family.o_bias), _flag(config, family.mlp_bias)
    attention = hidden * (q_out + 2 * kv_out) + q_out * hidden + qkv_bias * (q_out + 2 * kv_out) + o_bias * hidden
    mlp = family.mlp_matrices * hidden * intermediate + mlp_bias * ((family.mlp_matrices - 1) * intermediate + hidden)
    norm_size = hidden * (2 if family.norm_bias else 1) * family.parametric_norms
    norms = family.layer_norms * norm_size
    if family.norm_bias and family.layer_norms == 2 and config.get("use_parallel_residual"):
        norms = norm_size  # StableLM's parallel residual drops the post-attention norm
    if family.qk_norm != "never" and (not family.qk_norm_flag or config.get(family.qk_norm_flag)):
        per = 2 if family.qk_norm_bias else 1
        norms += per * {"head": 2 * head_dim, "projection": q_out + kv_out, "heads": q_out + kv_out}[family.qk_norm]
    layer = attention + mlp + norms

    tied = config.get("tie_word_embeddings", family.tied_default)
    root = vocab * hidden + norm_size + (0 if tied else vocab * hidden + family.head_bias * vocab)
    attention_linears = ((hidden + q_out + 2 * kv_out) if family.fused_qkv else (hidden + q_out) + 2 * (hidden + kv_out)) \
        + (q_out + hidden)
    if family.fused_gate_up:
        mlp_linears = (hidden + 2 * intermediate) + (intermediate + hidden)
    else:
        mlp_linears = family.mlp_matrices * (hidden + intermediate)
    linear_in_out = attention_linears + mlp_linears
    return {"name": name, "layer_params": layers * layer, "root_params": root, "layers": layers, "hidden": hidden,
            "heads": heads, "head_dim": head_dim, "vocab": vocab, "linear_in_out": linear_in_out}
