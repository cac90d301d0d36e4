"""benchmarks/report.py's wiring: what the emulation hands the planner, and which row names the device."""

from __future__ import annotations

import dataclasses
import json

import pytest

from benchmarks import report, suites

FLOPS_PER_TOKEN = 6 * 1_543_714_304 + 12 * 28 * 12 * 128 * 2048  # Qwen2.5-1.5B at 2048 tokens


def _row(group: str, name: str, step_s: float, reshard: bool) -> dict:
    settings = {"seq_len": 2048, "micro_batch": 1, "grad_accum": 4, "activation_checkpointing": "full",
                "loss_chunk_tokens": 2048, "sharding": "full", "reshard_after_forward": reshard, "reduce_dtype": "bf16"}
    return {"group": group, "name": name, "settings": settings, "step_time_s": step_s,
            "tokens_per_s_per_gpu": 2048 / step_s, "flops_per_token": FLOPS_PER_TOKEN}


@pytest.mark.parametrize("reshard", [True, False])
def test_the_emulation_predicts_the_cases_layout_on_its_own_links_full_bandwidth(reshard):
    """The planner is given the case's layout (weights kept gathered exactly when not resharded after forward) and
    the measured busbw as the link itself (efficiency 1: the measurement already is what NCCL reaches); the error
    is predicted over measured, minus one (positive: the model is slower than the run)."""
    from planning.calibration import CALIBRATION
    from planning.timing import estimate
    from planning.workload import MODELS, Cluster, Layout, Workload
    from training.gpus import GPUS

    rows = [_row("layouts-nvlink", "full", 0.7, reshard), _row("layouts-sockets", "full, sockets", 2.0, reshard)]
    links = {"layouts-sockets": {"all_gather layer": {"busbw_gbps": 2.5}}}
    [out] = report.emulation_rows(rows, links, suites.BENCH_MODEL)
    expected = estimate(MODELS[suites.BENCH_MODEL],
                        Workload(seq_len=2048, micro_batch=1, grad_accum=4, activation_checkpointing="full",
                                 loss_chunk_tokens=2048),
                        Cluster(gpu=GPUS["H200"], nodes=2, gpus_per_node=1, inter_node_gbps=2.5, name="2 x (1 H200)"),
                        Layout("full", keep_gathered=not reshard, reduce_dtype="bf16"),
                        dataclasses.replace(CALIBRATION, link_efficiency=1.0))
    assert out["predicted_step_s"] == pytest.approx(expected.step_s)
    assert out["error"] == pytest.approx(expected.step_s / 2.0 - 1)


def test_the_kept_gathered_and_resharded_layouts_predict_differently():
    """The control of the test above: the layout must move the prediction, or a lost `not` could not show."""
    links = {"layouts-sockets": {"all_gather layer": {"busbw_gbps": 2.5}}}
    predicted = {reshard: report.emulation_rows([_row("layouts-nvlink", "full", 0.7, reshard),
                                                 _row("layouts-sockets", "full, sockets", 2.0, reshard)],
                                                links, suites.BENCH_MODEL)[0]["predicted_step_s"] for reshard in (True, False)}
    assert predicted[True] != pytest.approx(predicted[False])


def test_the_report_names_the_device_of_the_first_case_that_ran_on_one(tmp_path):
    """A case that failed before reaching the GPU has no device: the header takes the next case's."""
    (tmp_path / "results").mkdir()
    failed = {"group": "main", "name": "a", "recipe": "example", "world_size": 1, "error": "FSDP1 needs a GPU",
              "settings": {"micro_batch": 1, "seq_len": 4096}}
    ran = {"group": "main", "name": "b", "recipe": "trainer", "device": "NVIDIA H200", "world_size": 1,
           "tokens_per_step_per_gpu": 4096, "step_time_s": 1.0, "flops_per_token": 1e10, "memory_cap_gib": None,
           "settings": {"micro_batch": 1, "seq_len": 4096}, "peak_mem_gib": 10.0}
    (tmp_path / "results" / "main-a.json").write_text(json.dumps(failed))
    (tmp_path / "results" / "main-b.json").write_text(json.dumps(ran))
    group = suites.Group("main", 1, [suites.Case("a"), suites.Case("b")])
    text = report.report(tmp_path, [group], 1)
    assert text.splitlines()[0].startswith("device: NVIDIA H200 x 1")
