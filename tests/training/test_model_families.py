"""Every model family the trainer accepts trains transformers' own loss.

The fused head and loss (training.loss) replace each family's lm_head and loss. For each family, a tiny
random model is built the way the trainer builds it (build_model: from config.json, FSDP2 over a one-rank
gloo group) and its loss and gradients are compared with transformers 5.23's own `forward(labels=...)`
on the same weights and inputs (two packed documents, a masked prompt). The weights are drawn large
(initializer_range 0.5) so that the logits reach the range where a head's bias, scale or soft cap
changes the loss by whole nats. Measured before the heads were supported (the test prints the gap):
Granite -19.21 nats, Cohere -21.98, Cohere2 -21.61, Phi -0.57; Gemma, Gemma 2 and Gemma 3 did not build
(a scaled embedding rebuilt as a rotary one; SDPA, which Gemma 2 refuses).
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from training.config import ConfigError, TrainConfig
from training.loss import IGNORE_INDEX
from training.families import MODEL_TYPES, supported_architecture
from training.model import LOGIT_HEADS, build_model, check_architecture

SHAPE = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.5,
             bos_token_id=1, eos_token_id=2, pad_token_id=0)
# What each family adds to the shape; the head settings are away from 1 / off so that ignoring them shows.
FAMILIES = {
    "qwen2": {}, "qwen3": {"head_dim": 8}, "llama": {}, "mistral": {}, "gemma": {"head_dim": 8},
    "gemma2": {"head_dim": 8, "final_logit_softcapping": 3.0, "query_pre_attn_scalar": 8},
    "gemma3_text": {"head_dim": 8, "final_logit_softcapping": 3.0, "query_pre_attn_scalar": 8},
    "granite": {"logits_scaling": 0.25}, "cohere": {"logit_scale": 4.0}, "cohere2": {"logit_scale": 4.0},
    "phi": {}, "phi3": {}, "olmo": {}, "olmo2": {}, "stablelm": {}, "starcoder2": {}, "glm": {"head_dim": 8},
}
TOKENS = 12
# Two packed documents (positions restart) in each of two rows; the first three targets are a masked prompt.
POSITIONS = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6]] * 2)


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('group') / 'store'}",
                            rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def reference_and_trainer(family: str, folder):
    """(transformers' model, the trainer's model) of one tiny random config, on the same fp32 weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(family, **SHAPE, **FAMILIES[family])
    config.save_pretrained(folder)
    cfg = TrainConfig(model=str(folder), seq_len=TOKENS, micro_batch=2)
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.float32)
    if getattr(reference.lm_head, "bias", None) is not None:
        torch.nn.init.normal_(reference.lm_head.bias)  # zero at init: a dropped bias would not show
    state = {f"lm.{k}": v.clone() for k, v in reference.state_dict().items()}
    trainer = build_model(cfg, torch.device("cpu"), 0, 1, full_state=state)
    reference.set_attn_implementation(trainer.lm.config._attn_implementation)  # the same attention arithmetic
    return reference, trainer


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_fused_loss_and_gradients_equal_the_familys_own(family, tmp_path, one_rank_group):
    reference, trainer = reference_and_trainer(family, tmp_path)
    torch.manual_seed(1)
    ids = torch.randint(3, SHAPE["vocab_size"], (2, TOKENS))
    labels = ids.clone()
    labels[:, :3] = IGNORE_INDEX
    labels[:, 5] = IGNORE_INDEX  # the second document's first token has no target in the first
    # transformers shifts the labels. Without a cache: with one, transformers skips its packed-document mask.
    expected = reference(input_ids=ids, labels=labels, position_ids=POSITIONS, use_cache=False).loss
    expected.backward()
    # The trainer's labels are the next token's, already shifted (training.data), the step's mean by scale.
    shifted = torch.cat([labels[:, 1:], torch.full((2, 1), IGNORE_INDEX)], dim=1)
    loss = trainer(ids, shifted, POSITIONS, scale=1 / int((shifted != IGNORE_INDEX).sum()))
    loss.backward()
    assert expected.item() > 1.0
    assert abs(loss.item() - expected.item()) < 1e-5, f"{family}: {loss.item() - expected.item():+.4f} nats"
    grads = {name.removeprefix("lm."): p.grad.full_tensor() for name, p in trainer.named_parameters()}
    for name, p in reference.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{family} {name}: {m}")


def config_json(**fields) -> dict:
    return {"architectures": ["SomethingForCausalLM"], **fields}


@pytest.mark.parametrize("family", sorted(LOGIT_HEADS))
def test_a_tested_family_is_accepted(family):
    assert supported_architecture(config_json(model_type=family)) is None


def test_every_accepted_family_has_its_loss_test():
    assert set(LOGIT_HEADS) == set(FAMILIES) == set(MODEL_TYPES)


def test_a_family_whose_head_is_not_checked_is_refused_in_one_line():
    # Mixtral's forward(labels=...) adds its router's load-balancing loss, which the fused loss does not.
    refusal = supported_architecture(config_json(model_type="mixtral"))
    assert refusal.startswith("the model's architecture 'mixtral' is not one whose loss the trainer checks; "
                              "supported: cohere, cohere2, gemma, gemma2, gemma3_text, glm, granite, llama, ")
    assert "\n" not in refusal


def test_multimodal_gemma3_is_refused_naming_the_text_checkpoints():
    assert "train its text-only gemma3_text checkpoints" in supported_architecture(config_json(model_type="gemma3"))


def test_a_local_model_of_a_refused_family_stops_before_the_model_is_built(tmp_path):
    from transformers import AutoConfig

    from training.model import model_config

    AutoConfig.for_model("mixtral", **SHAPE).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"^--model: the model's architecture 'mixtral' is not one"):
        model_config(TrainConfig(model=str(tmp_path)))


def test_the_refusal_reads_the_config_as_transformers_loads_it(tmp_path):
    from transformers import AutoConfig

    AutoConfig.for_model("qwen2", **SHAPE).save_pretrained(tmp_path)
    assert supported_architecture(json.loads((tmp_path / "config.json").read_text())) is None
    check_architecture(AutoConfig.from_pretrained(tmp_path))


def test_the_driver_refuses_a_local_model_of_another_family_before_ray_starts(tmp_path):
    from transformers import AutoConfig

    from training.inputs import check_inputs

    AutoConfig.for_model("mixtral", **SHAPE).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"^--model: the model's architecture 'mixtral' is not one"):
        check_inputs(TrainConfig(model=str(tmp_path), seq_len=16))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_auto_attention_on_gpu_picks_a_kernel_transformers_builds_the_family_with(family):
    # transformers refuses a kernel whose class lacks it, at build (StableLM: no flex attention; Gemma 2: no SDPA).
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.model import attention_kernel

    config = AutoConfig.for_model(family, **SHAPE, **FAMILIES[family])
    kernel = attention_kernel(TrainConfig(model="o/m", data="/d/chat.jsonl"), torch.device("cuda"), config)
    with torch.device("meta"):
        AutoModelForCausalLM.from_config(config, attn_implementation=kernel)


@pytest.mark.parametrize(("family", "attention"), [("stablelm", "flex"), ("gemma2", "sdpa")])
def test_an_attention_kernel_the_family_lacks_is_refused_before_the_model_is_built(family, attention, tmp_path):
    from transformers import AutoConfig

    from training.model import model_config

    AutoConfig.for_model(family, **SHAPE, **FAMILIES[family]).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=rf"^--attention: {family} models have no {attention} attention in transformers"):
        model_config(TrainConfig(model=str(tmp_path), attention=attention))


def test_the_driver_refuses_an_attention_kernel_a_local_model_lacks_before_ray_starts(tmp_path):
    from transformers import AutoConfig

    from training.inputs import check_inputs

    AutoConfig.for_model("stablelm", **SHAPE).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"^--attention: stablelm models have no flex attention in transformers"):
        check_inputs(TrainConfig(model=str(tmp_path), seq_len=16, attention="flex"))
