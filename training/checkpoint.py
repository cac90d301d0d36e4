"""Sharded checkpoints with torch.distributed.checkpoint: model, optimizer, step, data position.

Each worker writes its own shard files into a local folder; Ray Train uploads every
worker's folder into one checkpoint directory of the storage path, which then holds a
complete DCP checkpoint (rank 0 adds the .metadata file and train_state.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

TRAIN_STATE = "train_state.json"


def save(folder: str | Path, model, optimizer, step: int, data_position: int, rank: int) -> None:
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(folder))
    if rank == 0:
        (Path(folder) / TRAIN_STATE).write_text(json.dumps({"step": step, "data_position": data_position}))


def load(folder: str | Path, model, optimizer) -> tuple[int, int]:
    """Restore in place; returns (step, data_position) of the checkpoint."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    train_state = json.loads((Path(folder) / TRAIN_STATE).read_text())
    return int(train_state["step"]), int(train_state["data_position"])


def export_hf(model, config, folder: str | Path, rank: int) -> None:
    """Gather full weights to rank 0 and save them in Hugging Face format (safetensors)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from transformers import AutoModelForCausalLM

    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank != 0:
        return
    lm = AutoModelForCausalLM.from_config(config)
    lm.load_state_dict({k.removeprefix("lm."): v for k, v in full.items()}, strict=False)
    lm.tie_weights()
    lm.save_pretrained(str(folder), safe_serialization=True)
