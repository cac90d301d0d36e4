"""benchmarks/worker.py's wiring on the CPU: the collectives the links measurement issues and the figures it reports."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from benchmarks import worker

STEP_S = 0.001  # what each stand-in collective costs on the fake clock


@pytest.fixture()
def links(monkeypatch):
    """link_bandwidth with stand-in collectives that check their buffers and advance a fake clock by STEP_S."""
    clock = [0.0]
    calls = []

    def gather(output, input):
        assert output.numel() == input.numel() * world[0]  # output first, world times the input
        calls.append(("all_gather", output.dtype))
        clock[0] += STEP_S

    def scatter(output, input):
        assert output.numel() * world[0] == input.numel()  # output first, a world-th of the input
        calls.append(("reduce_scatter", input.dtype))
        clock[0] += STEP_S

    def reduce(tensor):
        calls.append(("all_reduce", tensor.dtype))
        clock[0] += STEP_S

    world = [0]
    monkeypatch.setattr(dist, "get_world_size", lambda: world[0])
    monkeypatch.setattr(dist, "barrier", lambda: None)
    monkeypatch.setattr(dist, "all_gather_into_tensor", gather)
    monkeypatch.setattr(dist, "reduce_scatter_tensor", scatter)
    monkeypatch.setattr(dist, "all_reduce", reduce)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(worker.time, "perf_counter", lambda: clock[0])

    def run(world_size):
        world[0] = world_size
        return worker.link_bandwidth(torch.device("cpu"), "tiny", repeats=3), calls
    return run


# nccl-tests' PERFORMANCE.md: busbw = algbw x (n-1)/n for all_gather and reduce_scatter, x 2(n-1)/n for all_reduce,
# with the size the full (gathered / reduced) buffer. The tiny model: 74,240 layer parameters over 2 layers, 32,832
# at the root; bf16 gathers (2 bytes), fp32 reductions (4 bytes).
@pytest.mark.parametrize("world, key, numel, bytes_per, factor", [
    (4, "all_gather layer", 37_120, 2, 3 / 4),
    (4, "reduce_scatter layer", 37_120, 4, 3 / 4),
    (4, "all_reduce layer", 37_120, 4, 2 * 3 / 4),
    (4, "all_gather root", 32_832, 2, 3 / 4),
    (4, "reduce_scatter root", 32_832, 4, 3 / 4),
    (4, "all_reduce root", 32_832, 4, 2 * 3 / 4),
    (2, "all_reduce layer", 37_120, 4, 2 * 1 / 2),
    (3, "all_gather layer", 37_119, 2, 2 / 3),  # 37,120 rounded down to a multiple of the world
    (3, "all_reduce root", 32_832, 4, 2 * 2 / 3),
])
def test_link_busbw_follows_nccl_tests_convention(links, world, key, numel, bytes_per, factor):
    results, _ = links(world)
    assert results[key]["bytes"] == numel * bytes_per
    assert results[key]["seconds"] == pytest.approx(STEP_S)
    assert results[key]["busbw_gbps"] == pytest.approx(numel * bytes_per * factor / STEP_S / 1e9)


def test_links_gather_in_bf16_and_reduce_in_fp32_for_each_unit(links):
    """FSDP2's mixed precision: parameters gathered in bf16, gradients reduced in fp32. One warm-up plus 3 timed."""
    results, calls = links(2)
    assert sorted(results) == sorted(f"{op} {unit}" for op in ("all_gather", "reduce_scatter", "all_reduce")
                                     for unit in ("layer", "root"))
    per_unit = [("all_gather", torch.bfloat16)] * 4 + [("reduce_scatter", torch.float32)] * 4 + [("all_reduce", torch.float32)] * 4
    assert calls == per_unit * 2


def test_a_worker_runs_each_case_on_its_own_model_with_the_groups_layout_and_one_base_per_model(monkeypatch, tmp_path):
    """A case naming a model runs that model, else --model; each gets the run's warm-up and steps and the group's
    GPUs per node; one random init per model, without adapters even when a LoRA case comes first, adapters added on top of it for a LoRA case only."""
    import json as json_module

    import training.model

    monkeypatch.setattr(dist, "init_process_group", lambda backend: None)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    bases, ran = [], []
    monkeypatch.setattr(training.model, "model_config", lambda cfg: cfg.model)
    monkeypatch.setattr(training.model, "full_state_dict_on_rank0",
                        lambda cfg, config: bases.append((cfg.model, cfg.lora_rank)) or {"base": cfg.model})
    monkeypatch.setattr(training.model, "with_adapters", lambda state, cfg, config: {**state, "lora": cfg.lora_rank})
    monkeypatch.setattr(worker, "run_case", lambda case, cfg, device, rank, world, full_state, warmup, steps, per_node:
                        ran.append((case.name, cfg.model, full_state, warmup, steps, per_node)) or {"name": case.name})
    spec = {"name": "g", "env": {}, "measure_matmul": True, "measure_links": True, "gpus_per_node": 1, "cases": [
        {"name": "b", "overrides": {"lora_rank": 4}}, {"name": "a"}, {"name": "c", "model": "tiny"}]}
    (tmp_path / "spec.json").write_text(json_module.dumps(spec))
    worker.worker(str(tmp_path / "spec.json"), str(tmp_path / "out"), "qwen2.5-1.5b", 2, 5)
    assert bases == [("qwen2.5-1.5b", 0), ("tiny", 0)]
    assert ran == [("b", "qwen2.5-1.5b", {"base": "qwen2.5-1.5b", "lora": 4}, 2, 5, 1),
                   ("a", "qwen2.5-1.5b", {"base": "qwen2.5-1.5b"}, 2, 5, 1),
                   ("c", "tiny", {"base": "tiny"}, 2, 5, 1)]
    written = json_module.loads((tmp_path / "out" / "results" / "g-b.json").read_text())
    assert (written["group"], written["world_size"]) == ("g", 2)
