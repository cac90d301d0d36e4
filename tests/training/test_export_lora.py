"""A LoRA run's export: the adapters in peft's format beside the model merged in fp32, and alpha's way to both.

The trainer's state is built the way the trainer builds it (with_adapters, frozen base weights in bf16), with
lora_B drawn away from peft's zero init so that the adapters change the output. References: peft's own
loader (PeftModel.from_pretrained), the LoRA paper's and peft's documented update, scaling = alpha / r
times B @ A, and vLLM's LoRA loading rules as its source states them.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from training.config import TrainConfig
from training.export import ADAPTER, write_export
from training.model import add_lora, builtin_config, lora_config, with_adapters

RANK = 4
PROBE = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64, 128, 11, 300, 2]])


def trained_state(alpha: float, update_size: float = 0.05) -> tuple[dict[str, torch.Tensor], TrainConfig]:
    """A tiny model's trainer state with LoRA adapters as after some training (B != 0)."""
    from transformers import AutoModelForCausalLM

    cfg = TrainConfig(model="tiny", lora_rank=RANK, lora_alpha=alpha)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(builtin_config("tiny"))
    state = with_adapters({f"lm.{k}": v for k, v in base.state_dict().items()}, cfg, builtin_config("tiny"))
    generator = torch.Generator().manual_seed(1)
    for name, value in state.items():
        if ".lora_B." in name:
            state[name] = torch.randn(value.shape, generator=generator) * update_size
        elif ".lora_" not in name:
            state[name] = value.to(torch.bfloat16)  # add_lora freezes the base in bf16
    return state, cfg


def base_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The base model's weights under their Hugging Face names, as the trainer holds them (bf16 values)."""
    return {k.removeprefix("lm.").replace(".base_layer.", "."): v.float() for k, v in state.items() if ".lora_" not in k}


def trainer_logits(state: dict[str, torch.Tensor], cfg: TrainConfig) -> torch.Tensor:
    """The trainer's model on CPU: adapters injected by add_lora, computed in fp32 (FSDP gathers the bf16 base as fp32)."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_config(builtin_config("tiny"))
    add_lora(lm, lora_config(cfg))
    lm.float()
    lm.load_state_dict({k.removeprefix("lm."): v.float() for k, v in state.items()}, strict=False)
    lm.tie_weights()
    with torch.no_grad():
        return lm(input_ids=PROBE).logits[0]


def adapted_layer_update(state: dict[str, torch.Tensor], module: str, alpha: float) -> torch.Tensor:
    """peft's documented LoRA update of one module: (alpha / r) * B @ A."""
    a, b = state[f"lm.{module}.lora_A.default.weight"], state[f"lm.{module}.lora_B.default.weight"]
    return alpha / RANK * (b @ a)


@pytest.fixture(scope="module", params=[8.0, 32.0], ids=["alpha8", "alpha32"])
def export(request, tmp_path_factory):
    state, cfg = trained_state(request.param)
    folder = tmp_path_factory.mktemp("lora-export")
    write_export(state, cfg, folder)
    return folder, state, cfg


def test_peft_loads_the_adapter_and_gives_the_trainers_logits(export):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    folder, state, cfg = export
    base = AutoModelForCausalLM.from_config(builtin_config("tiny"))
    base.load_state_dict(base_weights(state), strict=False)
    base.tie_weights()
    with torch.no_grad():
        plain = base(input_ids=PROBE).logits[0]
        served = PeftModel.from_pretrained(base, folder / ADAPTER)(input_ids=PROBE).logits[0]
    expected = trainer_logits(state, cfg)
    assert (expected - plain).abs().max() > 1e-2  # the adapters matter
    torch.testing.assert_close(served, expected, rtol=0, atol=1e-5)


# vLLM's rules for a LoRA folder (vllm/lora/worker_manager.py WorkerLoRAManager._load_adapter,
# vllm/lora/peft_helper.py PEFTHelper, vllm/lora/utils.py parse_fine_tuned_lora_name, vllm/lora/lora_model.py
# LoRAModel.from_local_checkpoint): adapter_model.safetensors; each key base_model.model.<module>.lora_A.weight or
# .lora_B.weight whose module's last name is among the model's LoRA modules with the packed ones expanded (Qwen2:
# qkv_proj -> q/k/v_proj, gate_up_proj -> gate/up_proj, o_proj, down_proj); r, lora_alpha and target_modules given;
# modules_to_save None and use_dora false (else refused); scaling lora_alpha / r unless use_rslora.
VLLM_QWEN2_LORA_MODULES = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
VLLM_KEY = re.compile(r"base_model\.model\.(?P<module>.+)\.lora_(?P<part>[AB])\.weight")


def test_the_adapter_files_follow_vllms_lora_loading_rules(export):
    from safetensors import safe_open

    folder, _, cfg = export
    config = json.loads((folder / ADAPTER / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["bias"]) == (RANK, cfg.lora_alpha, "none")
    assert not config["modules_to_save"] and not config["use_dora"] and not config["use_rslora"]
    assert set(config["target_modules"]) == VLLM_QWEN2_LORA_MODULES
    with safe_open(folder / ADAPTER / "adapter_model.safetensors", "pt") as f:
        keys = list(f.keys())
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in keys}
    parsed = [VLLM_KEY.fullmatch(k) for k in keys]
    assert all(parsed), [k for k, m in zip(keys, parsed) if not m]
    assert {m["module"].rsplit(".", 1)[-1] for m in parsed} == VLLM_QWEN2_LORA_MODULES
    layers = builtin_config("tiny").num_hidden_layers
    assert len(keys) == 2 * len(VLLM_QWEN2_LORA_MODULES) * layers  # an A and a B for every adapted module
    assert all(shape[0] == RANK for k, shape in shapes.items() if k.endswith("lora_A.weight"))
    assert all(shape[1] == RANK for k, shape in shapes.items() if k.endswith("lora_B.weight"))


def test_the_merged_model_is_merged_in_fp32_and_rounded_once(export):
    """Each adapted weight is bf16(base + update), the update added in fp32: adding it in bf16 rounds twice."""
    from safetensors.torch import load_file

    folder, state, cfg = export
    merged = load_file(folder / "model.safetensors")
    base = base_weights(state)
    module = "model.layers.1.mlp.down_proj"
    expected = (base[f"{module}.weight"] + adapted_layer_update(state, module, cfg.lora_alpha)).to(torch.bfloat16)
    assert torch.equal(merged[f"{module}.weight"], expected)
    assert torch.equal(merged["model.norm.weight"], base["model.norm.weight"].to(torch.bfloat16))  # not adapted


def test_the_readme_states_the_share_of_the_update_the_bf16_merge_keeps(export):
    """Measured again from the export's own files: 1 - |merged - (base + update)| / |update| over the adapted weights."""
    from safetensors.torch import load_file

    folder, state, cfg = export
    merged = load_file(folder / "model.safetensors")
    base = base_weights(state)
    lost = update = 0.0
    for name in state:
        if name.endswith(".lora_A.default.weight"):
            module = name.removeprefix("lm.").removesuffix(".lora_A.default.weight")
            delta = adapted_layer_update(state, module, cfg.lora_alpha)
            lost += float((merged[f"{module}.weight"].float() - base[f"{module}.weight"] - delta).square().sum())
            update += float(delta.square().sum())
    kept = 1 - (lost / update) ** 0.5
    stated = re.search(r"bf16 keeps (\d+\.\d)% of the adapters' update", (folder / "README.md").read_text())
    assert stated and float(stated.group(1)) == pytest.approx(100 * kept, abs=0.051)


def test_a_smaller_update_loses_more_of_itself_to_bf16(tmp_path):
    """The README's figure follows the update: at 1/10 the size, bf16 rounding removes a larger share."""
    shares = []
    for size, folder in ((0.005, tmp_path / "large"), (0.0005, tmp_path / "small")):
        state, cfg = trained_state(16.0, update_size=size)
        write_export(state, cfg, folder)
        shares.append(float(re.search(r"bf16 keeps (\d+\.\d)%", (folder / "README.md").read_text()).group(1)))
    assert shares[1] < shares[0] - 5, shares


@pytest.mark.parametrize("alpha", [8.0, 32.0])
def test_lora_alpha_sets_the_adapters_scale_on_the_trained_output(alpha):
    """The trainer's adapted layer (add_lora with the run's lora_config) outputs base(x) + (alpha / r) B A x."""
    from transformers import AutoModelForCausalLM

    state, cfg = trained_state(alpha)
    lm = AutoModelForCausalLM.from_config(builtin_config("tiny"))
    add_lora(lm, lora_config(cfg))
    lm.float()
    lm.load_state_dict({k.removeprefix("lm."): v.float() for k, v in state.items()}, strict=False)
    layer = lm.model.layers[0].self_attn.q_proj
    x = torch.randn(3, builtin_config("tiny").hidden_size)
    with torch.no_grad():
        change = layer(x) - layer.base_layer(x)
    expected = x @ adapted_layer_update(state, "model.layers.0.self_attn.q_proj", alpha).T
    torch.testing.assert_close(change, expected, rtol=1e-5, atol=1e-6)


def one_adapted_matrix_state() -> tuple[dict[str, torch.Tensor], object, object]:
    """A 1-layer Llama of width 2 with LoRA (r=1, alpha=1: scale 1) on down_proj alone, every weight fp32, as a
    caller other than the trainer holds them: down_proj's base is I, A = [[2^-9, 1/2]], B = [[1], [0]]."""
    from peft import LoraConfig, LoraModel
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(vocab_size=4, hidden_size=2, intermediate_size=2, num_hidden_layers=1, num_attention_heads=1,
                         num_key_value_heads=1, head_dim=2, tie_word_embeddings=False)
    lora = LoraConfig(r=1, lora_alpha=1, target_modules=["down_proj"], lora_dropout=0.0)
    lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    LoraModel(lm, lora, "default")
    state = {f"lm.{k}": v.detach().clone() for k, v in lm.state_dict().items()}
    module = "lm.model.layers.0.mlp.down_proj"
    state[f"{module}.base_layer.weight"] = torch.eye(2)
    state[f"{module}.lora_A.default.weight"] = torch.tensor([[2.0 ** -9, 0.5]])
    state[f"{module}.lora_B.default.weight"] = torch.tensor([[1.0], [0.0]])
    return state, config, lora


def test_an_fp32_merge_leaves_the_callers_weights_and_reports_the_share_bf16_keeps():
    """By hand: the update B A = [[2^-9, 1/2], [0, 0]]; merged in fp32, I + B A = [[1 + 2^-9, 1/2], [0, 1]]; bf16 keeps
    8 significant bits, so 1 + 2^-9 (under half of bf16's step 2^-7 at 1) rounds to 1: bf16 gives [[1, 1/2], [0, 1]].
    Lost: 2^-9 of an update of norm sqrt(2^-18 + 2^-2), so bf16 keeps 1 - 2^-9 / 0.5000038 = 0.99609378 of it."""
    from training.export import merged_weights

    state, config, lora = one_adapted_matrix_state()
    before = {k: v.clone() for k, v in state.items()}
    merged, kept = merged_weights(state, config, lora)
    assert all(torch.equal(state[k], before[k]) for k in state)  # the caller's tensors, untouched
    assert torch.equal(merged["model.layers.0.mlp.down_proj.weight"],
                       torch.tensor([[1.0, 0.5], [0.0, 1.0]], dtype=torch.bfloat16))
    assert kept == pytest.approx(0.99609378, abs=1e-8)
