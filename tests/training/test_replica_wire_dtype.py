"""--reduce-dtype reaches the link between nodes: the dtype of the hybrid layout's all-reduce of each unit's gradient
shard, recorded where torch.distributed is called, for both of its values.

apply_fsdp is given a GPU device: that only picks the dtypes (bf16 compute, the wire); the collectives themselves
run on a one-rank gloo group, as a 1 x 1 hybrid mesh ("replicate" x "shard").
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from training.model import CausalLMWithLoss, apply_fsdp, builtin_config

WIRES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def hybrid_mesh(tmp_path_factory):
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('group') / 'store'}",
                            rank=0, world_size=1)
    yield init_device_mesh("cpu", (1, 1), mesh_dim_names=("replicate", "shard"))
    dist.destroy_process_group()


def all_reduces_of_one_backward(monkeypatch, mesh, reduce_dtype: str) -> list:
    """[(dtype, group ranks)] of the all-reduces one forward and backward of the tiny model send. (A one-rank shard
    group has nothing to reduce-scatter: FSDP2 skips it, so the in-node wire is not seen here.)"""
    from transformers import AutoModelForCausalLM

    sent: list = []
    original = dist.all_reduce

    def recorded(tensor, *args, group=None, **kwargs):
        sent.append((tensor.dtype, tuple(dist.get_process_group_ranks(group))))
        return original(tensor, *args, group=group, **kwargs)

    monkeypatch.setattr(dist, "all_reduce", recorded)
    torch.manual_seed(0)
    model = CausalLMWithLoss(AutoModelForCausalLM.from_config(builtin_config("tiny")))
    apply_fsdp(model, torch.device("cuda"), mesh, reduce_dtype=reduce_dtype)
    ids = torch.randint(0, builtin_config("tiny").vocab_size, (1, 8))
    model(ids, ids, scale=1 / 8).backward()
    return sent


@pytest.mark.parametrize("reduce_dtype", sorted(WIRES))
def test_the_cross_node_all_reduce_sends_the_configured_dtype(reduce_dtype, monkeypatch, hybrid_mesh):
    sent = all_reduces_of_one_backward(monkeypatch, hybrid_mesh, reduce_dtype)
    replicate = tuple(dist.get_process_group_ranks(hybrid_mesh.get_group("replicate")))
    units = builtin_config("tiny").num_hidden_layers + 1  # a unit per decoder layer, and the root
    assert sent == [(WIRES[reduce_dtype], replicate)] * units

