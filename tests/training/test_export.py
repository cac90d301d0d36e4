"""Hugging Face exports (training.export): what transformers loads from them, and the guards.

A tiny model with a tokenizer and a generation config of its own is trained for two steps on 2
gloo workers; the same state is exported live and checkpointed, then exported from the checkpoint
on one process (python -m training.export), as a user would.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from training.config import TrainConfig
from training.export import ExportError, hf_weights, main
from training.model import builtin_config
from tests.process_group import leave, spawn

DATA = Path(__file__).resolve().parent.parent / "data"
PROBE = torch.tensor([[5, 17, 42, 99, 3, 250, 7, 64, 128, 11, 300, 2]])
# Qwen2.5-Instruct's sampling defaults: what a server must read from the export.
GENERATION = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05,
              "eos_token_id": [1, 2], "pad_token_id": 0}
STEPS = 2
ATTEMPT = "a"
CHECKPOINT = f"checkpoint_{STEPS:08d}_{ATTEMPT}"  # training.checkpoint.checkpoint_folder_name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_and_export(rank: int, world: int, port: int, model: str, run: str, live: str, out: str) -> None:
    from training import checkpoint as ckpt
    from training.data import synthetic_batches
    from training.export import export_live
    from training.model import build_model
    from training.step import make_optimizer, train_step

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    device = torch.device("cpu")
    cfg = TrainConfig(model=model, seq_len=32, micro_batch=2, seed=5)
    net = build_model(cfg, device, rank, world)
    optimizer = make_optimizer(net, 1e-2, 0.1, device)
    batches = synthetic_batches("pattern", 5, net.config.vocab_size, 32, 2, rank, world)
    for _ in range(STEPS):
        train_step(net, optimizer, batches, grad_accum=1, grad_clip=1.0, lr=1e-2, device=device)

    # Each worker uploads its folder into the run's checkpoint folder; rank 0 commits it.
    ckpt.Checkpoints(False, rank, world, run, ATTEMPT, print, settings=dataclasses.asdict(cfg)).save(
        net, optimizer, STEPS, STEPS, wait=True)
    export_live(net, cfg, live, rank)
    net.unshard()  # the root's embedding and head, gathered for a plain forward of the wrapped model
    with torch.no_grad():
        logits = net.lm(input_ids=PROBE).logits[0]
    net.reshard()
    if rank == 0:
        torch.save(logits, out)
    leave()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from benchmarks.tiny_model import save_tiny_model

    tmp = tmp_path_factory.mktemp("export")
    model = save_tiny_model(tmp / "model", DATA / "chat.jsonl")
    (tmp / "model" / "generation_config.json").write_text(json.dumps(GENERATION))
    spawn(_train_and_export, args=(2, _free_port(), model, str(tmp / "run"), str(tmp / "live"), str(tmp / "logits.pt")),
             nprocs=2)
    assert main([str(tmp / "run")]) == 0
    return tmp


def test_the_export_is_bf16_at_half_the_size_of_fp32(exported):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    with safe_open(exported / "live" / "model.safetensors", "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert AutoModelForCausalLM.from_pretrained(exported / "live").dtype == torch.bfloat16  # transformers' default load
    # The source folder holds the same architecture in fp32, saved by transformers.
    ratio = (exported / "live" / "model.safetensors").stat().st_size / (exported / "model" / "model.safetensors").stat().st_size
    assert ratio == pytest.approx(0.5, abs=0.01)


def test_the_export_reproduces_the_trainers_logits(exported):
    from transformers import AutoModelForCausalLM

    trainer = torch.load(exported / "logits.pt")
    lm = AutoModelForCausalLM.from_pretrained(exported / "live")
    with torch.no_grad():
        served = lm(input_ids=PROBE).logits[0].float()
    # bf16 weights and compute against the trainer's fp32: bf16 keeps 8 significant bits, so each
    # rounding moves a logit of size ~1 by up to 2^-8 (0.004); a few of them deep, 0.02 (measured: 0.005).
    assert trainer.abs().max() > 0.5
    torch.testing.assert_close(served, trainer, rtol=0, atol=0.02)


def test_the_export_carries_the_generation_config_tokenizer_and_chat_template(exported):
    from transformers import AutoTokenizer, GenerationConfig

    generation = GenerationConfig.from_pretrained(exported / "live")
    assert {k: getattr(generation, k) for k in GENERATION} == GENERATION
    source, served = AutoTokenizer.from_pretrained(exported / "model"), AutoTokenizer.from_pretrained(exported / "live")
    chat = [{"role": "user", "content": "What does NCCL do?"}]
    assert served.chat_template == source.chat_template
    assert served.apply_chat_template(chat, add_generation_prompt=True) == source.apply_chat_template(chat, add_generation_prompt=True)


def test_an_export_from_the_checkpoint_on_one_process_equals_the_live_one(exported):
    from safetensors.torch import load_file

    from_checkpoint = load_file(exported / "run" / f"hf-export-step-{STEPS}" / "model.safetensors")
    live = load_file(exported / "live" / "model.safetensors")
    assert from_checkpoint.keys() == live.keys()
    for name, tensor in live.items():
        assert torch.equal(from_checkpoint[name], tensor), name


def test_a_missing_run_is_one_line_naming_it(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"error: RUN: {tmp_path / 'nowhere'} does not exist\n"


def test_a_run_without_a_complete_checkpoint_is_refused(tmp_path, capsys):
    (tmp_path / "run" / "checkpoint_000001").mkdir(parents=True)  # an upload that never finished
    assert main([str(tmp_path / "run")]) == 2
    assert "has no complete checkpoint" in capsys.readouterr().err


def test_a_missing_step_names_the_steps_that_exist(exported, capsys):
    assert main([str(exported / "run"), "7"]) == 2
    assert capsys.readouterr().err == f"error: STEP: {exported / 'run'} has no complete checkpoint at step 7; it has step(s) {STEPS}\n"


def test_a_checkpoint_without_its_settings_is_refused(exported, tmp_path, capsys):
    shutil.copytree(exported / "run" / CHECKPOINT, tmp_path / "run" / "checkpoint_1")
    (tmp_path / "run" / "checkpoint_1" / "settings.json").unlink()
    assert main([str(tmp_path / "run")]) == 2
    assert "has no settings.json" in capsys.readouterr().err


# ---------------------------------------------------------------- the strict load


def tiny_state(tied: bool = True) -> tuple[dict[str, torch.Tensor], object]:
    """A tiny model's weights named as the trainer names them (CausalLMWithLoss holds the model as .lm)."""
    from transformers import AutoModelForCausalLM

    config = builtin_config("tiny")
    config.tie_word_embeddings = tied
    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(config)
    return {f"lm.{k}": v.clone() for k, v in lm.state_dict().items()}, config


def test_a_drifted_key_fails_the_export():
    state, config = tiny_state()
    state["lm.model.layers.0.self_attn.q_proj.weight_renamed"] = state.pop("lm.model.layers.0.self_attn.q_proj.weight")
    with pytest.raises(ExportError, match=r"1 missing \(e\.g\. \['model\.layers\.0\.self_attn\.q_proj\.weight'\]\), "
                                          r"1 unexpected \(e\.g\. \['model\.layers\.0\.self_attn\.q_proj\.weight_renamed'\]\)"):
        hf_weights(state, config)


def test_a_tensor_outside_the_model_fails_the_export():
    state, config = tiny_state()
    state["optimizer.step"] = torch.zeros(())
    with pytest.raises(ExportError, match=r"1 tensor\(s\) are not the model's .* e\.g\. optimizer\.step"):
        hf_weights(state, config)


def test_a_tensor_of_the_wrong_shape_fails_the_export():
    state, config = tiny_state()
    state["lm.model.norm.weight"] = torch.ones(32)
    with pytest.raises(ExportError, match=r"1 tensor\(s\) have the wrong shape, e\.g\. model\.norm\.weight: \(32,\), "
                                          r"the architecture's \(64,\)"):
        hf_weights(state, config)


def test_an_untied_model_without_its_head_fails_the_export():
    state, config = tiny_state(tied=False)
    del state["lm.lm_head.weight"]
    with pytest.raises(ExportError, match=r"1 missing \(e\.g\. \['lm_head\.weight'\]\)"):
        hf_weights(state, config)


def test_a_tied_head_that_differs_from_the_embedding_fails_the_export():
    state, config = tiny_state()
    state["lm.lm_head.weight"] = state["lm.lm_head.weight"] + 1
    with pytest.raises(ExportError, match="tie_word_embeddings is set but lm_head.weight differs"):
        hf_weights(state, config)


def test_a_tied_model_exports_the_embedding_once_as_its_head(tmp_path):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from training.export import save_hf

    state, config = tiny_state()
    del state["lm.lm_head.weight"]  # the embedding alone is the tied pair
    save_hf(hf_weights(state, config), config, tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in f.keys()
    lm = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(lm.lm_head.weight, state["lm.model.embed_tokens.weight"].to(torch.bfloat16))


# ---------------------------------------------------------------- which checkpoint, which template

# A template of its own for each checkpoint's run settings: the export's tokenizer shows which one it read.
TRAINED_TEMPLATE = "{{% for m in messages %}}step {step} {{{{ m['role'] }}}}: {{{{ m['content'] }}}}\n{{% endfor %}}"


@pytest.fixture(scope="module")
def several_checkpoints(exported, tmp_path_factory):
    """Checkpoints of steps 2, 10 and 6, listed in that order (a run resumed from an earlier one), then one of
    step 12 whose upload never finished (a shard missing): the newest complete one is step 10, not the last listed."""
    tmp = tmp_path_factory.mktemp("several")
    source = exported / "run" / CHECKPOINT
    for index, step in enumerate((2, 10, 6, 12)):
        folder = tmp / "run" / f"checkpoint_{index:06d}"
        shutil.copytree(source, folder)
        state = json.loads((folder / "train_state.json").read_text())
        (folder / "train_state.json").write_text(json.dumps({**state, "step": step}))
        (tmp / f"step-{step}.jinja").write_text(TRAINED_TEMPLATE.format(step=step))
        settings = json.loads((folder / "settings.json").read_text())
        (folder / "settings.json").write_text(json.dumps({**settings, "chat_template": str(tmp / f"step-{step}.jinja")}))
    next((tmp / "run" / "checkpoint_000003").glob("*.distcp")).unlink()
    return tmp / "run"


def test_the_export_takes_the_newest_complete_checkpoint(several_checkpoints, capsys):
    from transformers import AutoTokenizer

    assert main([str(several_checkpoints)]) == 0
    assert capsys.readouterr().out == f"exported step 10 to {several_checkpoints}/hf-export-step-10\n"
    served = AutoTokenizer.from_pretrained(several_checkpoints / "hf-export-step-10")
    assert served.chat_template == TRAINED_TEMPLATE.format(step=10)  # read from step 10's own folder


def test_the_export_serves_the_chat_template_the_run_trained_with(exported, several_checkpoints):
    """Not the source tokenizer's: the run set --chat-template to another one."""
    from transformers import AutoTokenizer

    assert main([str(several_checkpoints), "6"]) == 0
    served = AutoTokenizer.from_pretrained(several_checkpoints / "hf-export-step-6")
    source = AutoTokenizer.from_pretrained(exported / "model")
    chat = [{"role": "user", "content": "What does NCCL do?"}]
    assert served.apply_chat_template(chat, tokenize=False) == "step 6 user: What does NCCL do?\n"
    assert source.apply_chat_template(chat, tokenize=False) != served.apply_chat_template(chat, tokenize=False)
