"""Trainer options moved off their defaults reach the library that acts on them: the data pipeline's format
and sources (training.data.packed_dataset, as training.driver.real_datasets calls it) and peft's adapters."""

from __future__ import annotations

import pytest
import torch

from training.config import TrainConfig


@pytest.fixture
def data_calls(monkeypatch):
    """What real_datasets hands the data pipeline, per call (train first, then validation)."""
    import training.data

    calls = []
    monkeypatch.setattr(training.data, "packed_dataset", lambda path, **kwargs: calls.append({"path": path, **kwargs}))
    return calls


def datasets_of(data_calls, **options):
    from training.driver import real_datasets

    real_datasets(TrainConfig(**{"data": "s3://bucket/train.jsonl", **options}))
    return data_calls


@pytest.mark.parametrize("option,value,seen", [pytest.param(*case, id=case[0]) for case in [
    ("text_field", "body", lambda call: call["fmt"].text_field),
    ("messages_field", "conversation", lambda call: call["fmt"].messages_field),
    ("prompt_field", "instruction,input", lambda call: call["fmt"].prompt_fields),
    ("response_field", "output", lambda call: call["fmt"].response_field),
    ("assistant_only_loss", False, lambda call: call["fmt"].assistant_only_loss),
    ("default_system_prompt", False, lambda call: call["fmt"].default_system_prompt),
    ("seq_len", 1024, lambda call: call["seq_len"]),
    ("model", "Qwen/Qwen2.5-7B", lambda call: call["tokenizer_path"]),
    ("model_revision", "0123456789abcdef0123456789abcdef01234567", lambda call: call["revision"]),
    ("cache_dir", "/models", lambda call: call["cache_dir"]),
    ("seed", 7, lambda call: call["shuffle_seed"]),
]])
def test_a_data_option_reaches_the_data_pipeline(data_calls, option, value, seen):
    [train] = datasets_of(data_calls, **{option: value})
    expected = ("instruction", "input") if option == "prompt_field" else value
    assert seen(train) == expected


def test_the_messages_field_is_where_the_chat_is_read():
    from training.data import DataFormat, record_messages

    record = {"conversation": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
              "messages": [{"role": "user", "content": "other"}]}
    assert record_messages(record, DataFormat(messages_field="conversation")) == record["conversation"]


def test_no_shuffle_reaches_both_sides_as_file_order(data_calls):
    train, validation = datasets_of(data_calls, shuffle=False, seed=7, val_fraction=0.1)
    assert (train["shuffle_seed"], validation["shuffle_seed"]) == (None, None)


def test_both_sides_are_shuffled_with_the_seed(data_calls):
    """Validation too: --eval-batches may read only part of it, which must not be a file's head."""
    train, validation = datasets_of(data_calls, seed=7, val_data="s3://bucket/held-out.jsonl")
    assert (train["shuffle_seed"], validation["shuffle_seed"]) == (7, 7)


def test_val_fraction_splits_the_training_source(data_calls):
    train, validation = datasets_of(data_calls, val_fraction=0.1)
    assert (train["path"], train["part"], train["val_fraction"]) == ("s3://bucket/train.jsonl", "train", 0.1)
    assert (validation["path"], validation["part"], validation["val_fraction"]) == ("s3://bucket/train.jsonl", "validation", 0.1)


def test_val_data_is_the_validation_source(data_calls):
    _, validation = datasets_of(data_calls, val_data="s3://bucket/held-out.jsonl")
    assert validation["path"] == "s3://bucket/held-out.jsonl"


def test_the_chat_template_file_is_the_formats_template(data_calls, tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    [train] = datasets_of(data_calls, chat_template=str(template))
    assert train["fmt"].chat_template == "{% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.fixture
def lora_model():
    """The tiny model with the run's adapters: rank 4, alpha 32, dropout 0.25, on q_proj and v_proj only."""
    from transformers import AutoModelForCausalLM

    from training.model import add_lora, builtin_config, lora_config

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(builtin_config("tiny"))
    add_lora(lm, lora_config(TrainConfig(model="tiny", lora_rank=4, lora_alpha=32, lora_dropout=0.25,
                                         lora_target_modules="q_proj,v_proj")))
    return lm


def test_lora_alpha_scales_the_adapters_output_by_alpha_over_rank(lora_model):
    """peft's LoRA (Hu et al. 2021, section 4.1): the adapter adds (alpha / r) * B(A(x)); alpha 32 at rank 4 is 8."""
    layer = lora_model.model.layers[0].self_attn.q_proj
    layer.eval()  # dropout off
    layer.base_layer.float()  # the frozen base is bf16; in fp32 the sum can be compared closely
    torch.nn.init.normal_(layer.lora_B["default"].weight)  # peft starts B at zero: no adapter output to see
    x = torch.randn(3, 64)
    with torch.no_grad():
        base = layer.base_layer(x)
        adapter = x @ layer.lora_A["default"].weight.T @ layer.lora_B["default"].weight.T
        torch.testing.assert_close(layer(x) - base, 8 * adapter, rtol=1e-4, atol=1e-4)


def test_lora_dropout_is_the_adapters_dropout(lora_model):
    assert lora_model.model.layers[0].self_attn.v_proj.lora_dropout["default"].p == 0.25


def test_lora_target_modules_are_the_only_adapted_layers(lora_model):
    adapted = sorted({name.split(".")[-4] for name, _ in lora_model.named_parameters() if "lora_A" in name})
    assert adapted == ["q_proj", "v_proj"]


@pytest.mark.parametrize("compile_layers", [True, False])
def test_compile_reaches_the_model_built_on_a_gpu(compile_layers, monkeypatch):
    """build_model compiles each decoder layer on CUDA only; the build is stopped at FSDP, before any CUDA call."""
    import training.model

    compiled = []

    def stop(*args, **kwargs):
        raise StopIteration

    monkeypatch.setattr(training.model, "apply_compile", lambda model: compiled.append(model) or stop())
    monkeypatch.setattr(training.model, "apply_fsdp", stop)
    with pytest.raises(StopIteration):
        training.model.build_model(TrainConfig(model="tiny", compile=compile_layers), torch.device("cuda"), 0, 1,
                                   full_state={})
    assert len(compiled) == int(compile_layers)


def test_apply_compile_hands_each_decoder_layer_to_torch_compile():
    """nn.Module.compile keeps the compiled forward in _compiled_call_impl (torch/nn/modules/module.py)."""
    from transformers import AutoModelForCausalLM

    from training.model import CausalLMWithLoss, apply_compile, builtin_config

    model = CausalLMWithLoss(AutoModelForCausalLM.from_config(builtin_config("tiny")), 64)
    apply_compile(model)
    assert [layer._compiled_call_impl is not None for layer in model.decoder_layers] == [True, True]


def test_model_revision_is_the_revision_the_weights_are_loaded_at(monkeypatch):
    import transformers

    import training.storage
    from training.model import builtin_config, full_state_dict_on_rank0

    loaded = {}

    def from_pretrained(path, **kwargs):
        loaded.update(kwargs, path=path)
        return AutoModel.from_config(builtin_config("tiny"))

    AutoModel = transformers.AutoModelForCausalLM
    monkeypatch.setattr(training.storage, "local_model_path", lambda model, cache_dir: model)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    full_state_dict_on_rank0(TrainConfig(model="org/name", model_revision="0123456789abcdef0123456789abcdef01234567"),
                             builtin_config("tiny"))
    assert (loaded["path"], loaded["revision"]) == ("org/name", "0123456789abcdef0123456789abcdef01234567")


def test_predicted_link_gbps_is_the_health_gates_plan(monkeypatch):
    import training.health

    seen = {}
    monkeypatch.setattr(training.health, "run_gate",
                        lambda rank, device, message_bytes, planned, log: seen.update(planned=planned))
    training.health.gate_for_run(TrainConfig(model="tiny", predicted_link_gbps=7.5), 0, torch.device("cpu"), print)
    assert seen == {"planned": 7.5}
