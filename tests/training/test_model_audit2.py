"""training.model's hybrid cross-node hook averages a gradient shard over the replicas (FSDP2's HSDP all-reduce
is a mean), in the wire dtype asked for."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from training import model as model_module


@pytest.mark.parametrize("wire", [torch.float32, torch.bfloat16])
def test_the_replica_hook_averages_the_shard_over_the_replicas(monkeypatch, wire):
    # Two replicas: this node's shard [1, 2, 3, 4] and the other node's [3, 6, 1, 0]; all_reduce sums them (SUM).
    other = torch.tensor([3.0, 6.0, 1.0, 0.0])
    sent = []

    def all_reduce(tensor, group=None):
        sent.append(tensor.dtype)
        tensor.add_(other.to(tensor.dtype))

    monkeypatch.setattr(model_module, "dist", SimpleNamespace(get_world_size=lambda group: 2, all_reduce=all_reduce))
    shard = torch.tensor([1.0, 2.0, 3.0, 4.0])
    model_module.replica_all_reduce("replicate", wire)(shard)
    assert shard.tolist() == [2.0, 4.0, 2.0, 2.0] and shard.dtype == torch.float32
    assert sent == [wire]


def test_named_lora_targets_among_the_decoder_layers_linear_layers_are_accepted():
    from training.config import TrainConfig

    lora = model_module.lora_config(TrainConfig(model="tiny", lora_rank=4, lora_target_modules="q_proj,v_proj"),
                                    model_module.builtin_config("tiny"))
    assert set(lora.target_modules) == {"q_proj", "v_proj"}


def test_a_named_lora_target_the_decoder_layers_lack_is_refused_by_name():
    from training.config import ConfigError, TrainConfig

    cfg = TrainConfig(model="tiny", lora_rank=4, lora_target_modules="q_proj,fc1")
    with pytest.raises(ConfigError, match=r"^--lora-target-modules: fc1 not among the linear layers of qwen2's decoder "
                                          r"layers \(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj\)$"):
        model_module.lora_config(cfg, model_module.builtin_config("tiny"))
