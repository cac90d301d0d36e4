"""LoRA under FSDP2 on gloo, without Ray: what trains, what stays frozen, resume, and the merged export.

One run per world size: build, one backward to see which parameters get gradients, two steps,
a checkpoint, two more steps; then a fresh model resumed from the checkpoint repeats those two
steps; then the merged Hugging Face export and the trainer's logits.
"""

from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

from training.config import TrainConfig
from tests.process_group import leave, spawn

LORA = {"lora_rank": 4, "lora_alpha": 8.0, "lora_target_modules": "all-linear"}
PROBE = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64, 128, 11, 300, 2]])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _full(model) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _run(rank: int, world: int, port: int, folder: str) -> None:
    from training import checkpoint as ckpt
    from training.data import synthetic_batches
    from training.export import export_live
    from training.model import build_model
    from training.step import make_optimizer, step_loss_scale, train_step

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    micro_batch = 4 // world  # the same global batch at every world size
    cfg = TrainConfig(model="tiny", seq_len=32, micro_batch=micro_batch, seed=2, **LORA)

    def fresh(position: int = 0):
        model = build_model(cfg, device, rank, world)
        optimizer = make_optimizer(model, 1e-2, 0.1, device)
        return model, optimizer, synthetic_batches("pattern", 2, model.config.vocab_size, 32, micro_batch, rank, world, position)

    def steps(model, optimizer, batches, n: int) -> list[float]:
        out = []
        for _ in range(n):
            out.append(train_step(model, optimizer, batches, grad_accum=2, grad_clip=1.0, lr=1e-2, device=device).loss)
        return out

    model, optimizer, batches = fresh()
    initial = _full(model)
    probe = [next(synthetic_batches("pattern", 7, model.config.vocab_size, 32, micro_batch, rank, world))]
    model(**probe[0], scale=step_loss_scale(probe, device)[0]).backward()
    with_gradients = sorted(name for name, p in model.named_parameters() if p.grad is not None)
    optimizer_params = sum(len(group["params"]) for group in optimizer.param_groups)
    optimizer.zero_grad(set_to_none=True)

    losses = steps(model, optimizer, batches, 2)
    ckpt.save(f"{folder}/ckpt", model, optimizer, step=2, data_position=4, rank=rank)
    dist.barrier()
    losses += steps(model, optimizer, batches, 2)
    trained = _full(model)
    export_live(model, cfg, f"{folder}/hf", rank)
    model.unshard()  # the root's embedding and head, gathered for a plain forward of the wrapped model
    with torch.no_grad():
        logits = model.lm(input_ids=PROBE).logits[0]
    model.reshard()

    model, optimizer, _ = fresh()
    _, position = ckpt.load(f"{folder}/ckpt", model, optimizer)
    resumed = steps(model, optimizer, synthetic_batches("pattern", 2, model.config.vocab_size, 32, micro_batch, rank, world,
                                                        position), 2)
    if rank == 0:
        torch.save({"initial": initial, "trained": trained, "losses": losses, "resumed": resumed, "logits": logits,
                    "with_gradients": with_gradients, "optimizer_params": optimizer_params}, f"{folder}/result.pt")
    leave()


def run(world: int, folder) -> dict:
    spawn(_run, args=(world, _free_port(), str(folder)), nprocs=world)
    return torch.load(folder / "result.pt") | {"folder": folder}


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    return run(1, tmp_path_factory.mktemp("lora1"))


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return run(2, tmp_path_factory.mktemp("lora2"))


def peft_reference():
    """The same adapters on a plain transformers model with peft's own wrapper, on one process."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from training.model import builtin_config

    lm = AutoModelForCausalLM.from_config(builtin_config("tiny"))
    return get_peft_model(lm, LoraConfig(r=LORA["lora_rank"], lora_alpha=LORA["lora_alpha"],
                                         target_modules=LORA["lora_target_modules"]))


def test_only_the_adapters_get_gradients_and_optimizer_state(two):
    reference = peft_reference()
    trainable = sorted("lm." + name.removeprefix("base_model.model.")
                       for name, p in reference.named_parameters() if p.requires_grad)
    assert trainable and all("lora_" in name for name in trainable)
    assert two["with_gradients"] == trainable
    assert two["optimizer_params"] == len(trainable)


def test_base_weights_stay_frozen_in_bf16_while_the_adapters_train(two):
    initial, trained = two["initial"], two["trained"]
    base = [name for name in initial if "lora_" not in name]
    assert {initial[name].dtype for name in base} == {torch.bfloat16}
    assert all(torch.equal(initial[name], trained[name]) for name in base)
    adapters = [name for name in initial if "lora_" in name]
    assert {initial[name].dtype for name in adapters} == {torch.float32}
    # peft starts B at zero (the model starts as the base model); training moves it.
    assert all(trained[name].abs().max() > 0 for name in adapters if "lora_B" in name)


def test_two_workers_train_the_same_adapters_as_one(one, two):
    torch.testing.assert_close(torch.tensor(two["losses"]), torch.tensor(one["losses"]), rtol=1e-5, atol=1e-6)
    for name, weight in one["trained"].items():
        # Adam turns rounding differences of near-zero gradients into a fraction of an lr-sized (1e-2) update.
        torch.testing.assert_close(two["trained"][name], weight, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_a_resumed_lora_run_repeats_the_same_steps(two):
    torch.testing.assert_close(torch.tensor(two["resumed"]), torch.tensor(two["losses"][2:]), rtol=1e-6, atol=1e-6)


def test_the_merged_export_loads_without_peft_and_reproduces_the_lora_models_logits(two):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    folder = two["folder"] / "hf"
    with safe_open(folder / "model.safetensors", "pt") as f:
        assert not [k for k in f.keys() if "lora" in k or "base_layer" in k]
    lm = AutoModelForCausalLM.from_pretrained(folder)
    assert lm.dtype == torch.bfloat16
    with torch.no_grad():
        served = lm(input_ids=PROBE).logits[0].float()
    trainer = two["logits"]
    # The adapters moved the logits (a merge that dropped them would fail here)...
    base = AutoModelForCausalLM.from_config(lm.config, dtype=torch.float32)
    base.load_state_dict({k.removeprefix("lm.").replace(".base_layer", ""): v.float() for k, v in two["initial"].items()
                          if "lora_" not in k})
    with torch.no_grad():
        assert (base(input_ids=PROBE).logits[0] - trainer).abs().max() > 0.1
    # ...and the bf16 merged model reproduces them: bf16 keeps 8 significant bits (0.004 per rounding
    # of a logit of size ~1), a few roundings deep: 0.02.
    torch.testing.assert_close(served, trainer, rtol=0, atol=0.02)


def _dropout(rank: int, port: int, out: str) -> None:
    from training.data import synthetic_batches
    from training.model import build_model
    from training.step import evaluate

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=1)
    device = torch.device("cpu")
    cfg = TrainConfig(model="tiny", seq_len=32, micro_batch=2, seed=2, lora_dropout=0.5, **LORA)
    model = build_model(cfg, device, rank, 1)
    with torch.no_grad():  # adapters that change the output (peft starts B at zero)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.to_local().normal_()
    batches = [next(synthetic_batches("pattern", 2, model.config.vocab_size, 32, 2, rank, 1))]
    with torch.no_grad():
        training = [model(**batches[0]).item() for _ in range(2)]
    evaluated = [evaluate(model, batches, device)[0] for _ in range(2)]
    torch.save({"training": training, "evaluated": evaluated, "mode_after": model.training}, out)
    leave()


def test_validation_runs_without_adapter_dropout_and_training_resumes_with_it(tmp_path):
    spawn(_dropout, args=(_free_port(), str(tmp_path / "dropout.pt")), nprocs=1)
    result = torch.load(tmp_path / "dropout.pt")
    assert result["training"][0] != result["training"][1]  # dropout is live in training...
    assert result["evaluated"][0] == result["evaluated"][1]  # ...and off in validation
    assert result["mode_after"] is True
