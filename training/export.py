"""Hugging Face exports a user can load and serve: `python -m training.export RUN [STEP]`.

An export is a folder that `AutoModelForCausalLM.from_pretrained` loads without this code: bf16
safetensors (half the trainer's fp32 master weights), config.json, the source model's
generation_config.json (its sampling defaults and stop tokens) and its tokenizer with the chat
template the trainer rendered chats with. A LoRA run's export is that model with its adapters
merged in fp32 (it needs no peft), and beside it `adapter/`, the adapters alone in peft's format
(PeftModel.from_pretrained, vLLM's --lora-modules), with a README.md that states how much of the
update the bf16 merge keeps: adding a small update to bf16 weights rounds part of it away.

The trainer's weights must match the architecture name for name: a missing, unexpected or
mis-shaped tensor stops the export (a lenient load would save random weights in its place).

From the command line, an export is made from a run's DCP checkpoint on one process, with no
GPU and no process group: RUN is the run's folder or s3:// URI, STEP one of its checkpoints
(default: the newest). It is written to RUN/hf-export-step-STEP unless --out says otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from training.config import BUILTIN_MODELS, TrainConfig

EXPORT_DTYPE = torch.bfloat16
PREFIX = "lm."  # CausalLMWithLoss holds the Hugging Face model as .lm
ADAPTER = "adapter"  # the export's subfolder holding the LoRA adapters alone
ADAPTER_NAME = "default"  # peft's name for the one adapter inject_adapter_in_model adds
# What an fp8 run's checkpoints pickled before training.fp8.plain_tensors: a reader without torchao can't load it.
FLOAT8_WRAPPER = "WeightWithDynamicFloat8CastTensor"


class ExportError(ValueError):
    """The weights or the checkpoint cannot make a faithful export; the message is one line."""


def hf_weights(state: dict[str, torch.Tensor], config, lora=None) -> dict[str, torch.Tensor]:
    """The trainer's full state dict as the Hugging Face model's bf16 weights (merged_weights)."""
    return merged_weights(state, config, lora)[0]


def merged_weights(state: dict[str, torch.Tensor], config, lora=None) -> tuple[dict[str, torch.Tensor], float | None]:
    """(the Hugging Face model's bf16 weights, with LoRA the share of the adapters' update they keep).

    Checked strictly against the architecture of `config` (with `lora`, a peft LoraConfig, against it
    with those adapters); the adapters are then merged by peft in fp32 before the cast to bf16. Tied
    embeddings: the embedding is the weight, and a separate lm_head, if present, must equal it.
    The share kept: 1 - |bf16(merged) - merged| / |merged - base| over the adapted weights (norms of all
    of them together), where merged = base + the update in fp32.
    """
    from transformers import AutoModelForCausalLM

    foreign = sorted(k for k in state if not k.startswith(PREFIX))
    if foreign:
        raise ExportError(f"{len(foreign)} tensor(s) are not the model's (no {PREFIX!r} prefix), e.g. {foreign[0]}")
    weights = {k.removeprefix(PREFIX): v for k, v in state.items()}
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        tuner = None
        if lora:
            from peft import LoraModel

            tuner = LoraModel(lm, lora, "default")  # injects the adapters into lm
    expected = lm.state_dict()
    tied = getattr(config, "tie_word_embeddings", False)
    if tied and "lm_head.weight" in weights:
        if not torch.equal(weights["lm_head.weight"], weights.get("model.embed_tokens.weight", torch.empty(0))):
            raise ExportError("tie_word_embeddings is set but lm_head.weight differs from model.embed_tokens.weight")
    if tied:
        weights.setdefault("lm_head.weight", weights.get("model.embed_tokens.weight"))
    missing = sorted(k for k in expected if weights.get(k) is None)
    unexpected = sorted(set(weights) - set(expected))
    if missing or unexpected:
        raise ExportError(f"the weights do not match {config.model_type}'s architecture: "
                          f"{len(missing)} missing (e.g. {missing[:2]}), {len(unexpected)} unexpected (e.g. {unexpected[:2]})")
    wrong = [(k, tuple(weights[k].shape), tuple(t.shape)) for k, t in expected.items() if weights[k].shape != t.shape]
    if wrong:
        name, got, want = wrong[0]
        raise ExportError(f"{len(wrong)} tensor(s) have the wrong shape, e.g. {name}: {got}, the architecture's {want}")
    if tuner is None:
        return {k: v.to(EXPORT_DTYPE) for k, v in weights.items()}, None
    # Merge in fp32: a bf16 base weight plus an fp32 update, rounded once, on export. On copies: peft merges into
    # the base weight in place, which would change an fp32 caller's own tensors and the base the share is taken from.
    lm.load_state_dict({k: v.to(torch.float32, copy=True) for k, v in weights.items()}, assign=True)
    lm.tie_weights()
    merged = tuner.merge_and_unload().state_dict()
    lost = update = 0.0
    for name, value in merged.items():
        base = weights.get(name.removesuffix(".weight") + ".base_layer.weight")
        if base is not None:
            lost += float((value.to(EXPORT_DTYPE).float() - value).square().sum())
            update += float((value - base.float()).square().sum())
    return {k: v.to(EXPORT_DTYPE) for k, v in merged.items()}, 1 - (lost / update) ** 0.5 if update else 1.0


def adapter_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The trainer's LoRA tensors under the names peft saves them with (PeftModel.save_pretrained):
    base_model.model.<module>.lora_A.weight / lora_B.weight, fp32 as trained."""
    tensors = {}
    for name, value in state.items():
        if ".lora_A." in name or ".lora_B." in name:
            module = name.removeprefix(PREFIX).replace(f".{ADAPTER_NAME}.", ".")
            tensors[f"base_model.model.{module}"] = value.detach().to(torch.float32).contiguous()
    return tensors


def save_adapter(state: dict[str, torch.Tensor], cfg: TrainConfig, config, lora, folder: str | Path) -> None:
    """The adapters alone, as peft saves them (adapter_config.json, adapter_model.safetensors), in a form vLLM's
    LoRA loader takes (vllm/lora/worker_manager.py _load_adapter, vllm/lora/peft_helper.py PEFTHelper,
    vllm/lora/lora_model.py LoRAModel.from_local_checkpoint): tensors named base_model.model.<module>.lora_A/B.weight
    only, for the decoder layers' linear modules; bias "none", no modules_to_save, no DoRA; scaling alpha / r."""
    from peft import LoraModel
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        tuner = LoraModel(AutoModelForCausalLM.from_config(config), lora, ADAPTER_NAME)
    adapted = sorted({name.rsplit(".", 1)[-1] for name, module in tuner.model.named_modules() if hasattr(module, "lora_A")})
    saved = dataclasses.replace(lora, target_modules=adapted, base_model_name_or_path=cfg.model,
                                revision=cfg.model_revision, task_type="CAUSAL_LM", inference_mode=True)
    Path(folder).mkdir(parents=True, exist_ok=True)
    saved.save_pretrained(str(folder))
    save_file(adapter_tensors(state), str(Path(folder) / "adapter_model.safetensors"), metadata={"format": "pt"})


def readme(cfg: TrainConfig, kept: float) -> str:
    """The LoRA export's README.md: what each part is, and what the bf16 merge keeps of the update."""
    return (f"# LoRA export of {cfg.model}\n\n"
            f"- `./`: the model with its adapters merged (merged in fp32, saved in bf16). "
            f"**bf16 keeps {kept:.1%} of the adapters' update** (measured on this export: 1 - |rounding| / |update| "
            f"over the adapted weights); the rest is rounded away, more so at small learning rates.\n"
            f"- `{ADAPTER}/`: the adapters alone, exactly as trained (fp32, rank {cfg.lora_rank}, alpha "
            f"{cfg.lora_alpha:g}), in peft's format: `PeftModel.from_pretrained(base, \"{ADAPTER}\")`, or vLLM with "
            f"`--enable-lora --lora-modules name=<path>/{ADAPTER}` and a --max-lora-rank of at least {cfg.lora_rank}. "
            f"Serve it on {cfg.model} in bf16, the base weights it was trained on.\n")


def save_hf(weights: dict[str, torch.Tensor], config, folder: str | Path, generation_config=None, tokenizer=None) -> None:
    """Save checked weights (hf_weights) as a Hugging Face model folder, with what serving it needs."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(config, dtype=EXPORT_DTYPE)
    lm.load_state_dict(weights, strict=True, assign=True)
    lm.tie_weights()
    if generation_config is not None:
        lm.generation_config = generation_config
    lm.save_pretrained(str(folder))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))


def source_files(cfg: TrainConfig, config):
    """(generation config, tokenizer) of the run's source model: its own generation_config.json when it
    has one, else the defaults transformers derives from the model config; no tokenizer for a built-in.
    The tokenizer carries the chat template the run trained with (--chat-template)."""
    from transformers import GenerationConfig

    if cfg.model in BUILTIN_MODELS:
        return GenerationConfig.from_model_config(config), None
    from training.data import _tokenizer
    from training.storage import local_model_path

    try:
        generation = GenerationConfig.from_pretrained(local_model_path(cfg.model, cfg.cache_dir), cache_dir=cfg.cache_dir,
                                                      revision=cfg.model_revision)
    except OSError:  # the model has no generation_config.json
        generation = GenerationConfig.from_model_config(config)
    tokenizer = _tokenizer(cfg.model, cfg.cache_dir, cfg.model_revision)
    if cfg.chat_template:  # the template the run trained with is the one to serve with
        import copy

        from training.data import chat_template_text

        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = chat_template_text(cfg.chat_template, cfg.cache_dir)
    return generation, tokenizer


def write_export(state: dict[str, torch.Tensor], cfg: TrainConfig, folder: str | Path) -> None:
    """The export of a full trainer state dict (one process); with LoRA, its adapter/ and README.md too."""
    from training.model import lora_config, model_config

    config = model_config(cfg)
    lora = lora_config(cfg)
    generation, tokenizer = source_files(cfg, config)
    weights, kept = merged_weights(state, config, lora)
    save_hf(weights, config, folder, generation, tokenizer)
    if lora:
        save_adapter(state, cfg, config, lora, Path(folder) / ADAPTER)
        (Path(folder) / "README.md").write_text(readme(cfg, kept))


def export_live(model, cfg: TrainConfig, folder: str | Path, rank: int) -> None:
    """Export the training model: every rank joins the gather of its shards, rank 0 writes `folder`."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from training.fp8 import plain_tensors

    # One rank gathers nothing: an fp8 run's weights would still be torchao's float8 wrapper.
    full = plain_tensors(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)))
    if rank == 0:
        write_export(full, cfg, folder)


# ---------------------------------------------------------------- from a checkpoint, on one process


def checkpoint_model_state(folder: str | Path) -> dict[str, torch.Tensor]:
    """The model's full tensors of a DCP checkpoint, read on this process alone (no optimizer state).

    DCP's metadata gives every tensor's full shape and dtype; loading into full-size tensors
    without a process group makes DCP assemble them from every rank's shards.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = FileSystemReader(str(folder))
    items = reader.read_metadata().state_dict_metadata
    model = {key.removeprefix("model."): torch.empty(meta.size, dtype=meta.properties.dtype)
             for key, meta in items.items() if key.startswith("model.") and isinstance(meta, TensorStorageMetadata)}
    with warnings.catch_warnings():  # "no process group: assuming a single process", which is the intent
        warnings.simplefilter("ignore", UserWarning)
        try:
            dcp.load({"model": model}, storage_reader=reader, no_dist=True)
        except (Exception, CheckpointException) as error:  # DCP's CheckpointException is a BaseException
            if FLOAT8_WRAPPER not in str(error):
                raise
            raise ExportError(f"{folder} holds torchao's {FLOAT8_WRAPPER} (an fp8 run's checkpoint from before "
                              f"checkpoints held plain tensors): export it where torchao is installed "
                              f"(requirements-train.txt)") from None
    return model


def run_checkpoints(run: str) -> list[tuple[int, str]]:
    """(step, location) of a run's complete checkpoints, oldest first; ExportError if there is no such run."""
    from training.storage import complete_checkpoints, exists

    if not exists(run):
        raise ExportError(f"RUN: {run} does not exist")
    found = complete_checkpoints(run)
    if not found:
        raise ExportError(f"RUN: {run} has no complete checkpoint (a checkpoint_* folder with every rank's shards)")
    return found


def export_checkpoint(run: str, step: int | None, out: str | None) -> tuple[int, str]:
    """Export one of a run's checkpoints (the newest when step is None); returns (step, where it went)."""
    from training.storage import SETTINGS, download_folder, exists, read_text, upload_folder

    found = run_checkpoints(run)
    steps = [s for s, _ in found]
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise ExportError(f"STEP: {run} has no complete checkpoint at step {step}; it has step(s) {', '.join(map(str, steps))}")
    location = dict(found)[step]
    if not exists(f"{location}/{SETTINGS}"):
        raise ExportError(f"{location} has no {SETTINGS} (written beside checkpoints since exports from them): "
                          "the source model is unknown")
    settings = json.loads(read_text(f"{location}/{SETTINGS}"))
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    cfg = TrainConfig(**{k: v for k, v in settings.items() if k in known})
    target = out or f"{run.rstrip('/')}/hf-export-step-{step}"
    with tempfile.TemporaryDirectory() as scratch:
        local = location if "://" not in location else download_folder(location, f"{scratch}/checkpoint")
        state = checkpoint_model_state(local)
        write_export(state, cfg, f"{scratch}/export")
        upload_folder(f"{scratch}/export", target)
    return step, target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", metavar="RUN", help="the run's folder or s3:// URI (<storage path>/<run name>)")
    parser.add_argument("step", metavar="STEP", nargs="?", type=int, default=None,
                        help="the checkpoint's step (default: the newest complete one)")
    parser.add_argument("--out", default=None, help="where to write the export (default: RUN/hf-export-step-STEP)")
    args = parser.parse_args(argv)
    from training.storage import storage_uri

    try:
        step, target = export_checkpoint(storage_uri(args.run), args.step, args.out)
    except ExportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"exported step {step} to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
