"""benchmarks.kernel_profile's printed line for each shape, its copy bandwidth's units, and a failing shape that must
not cost the others: figures worked by hand."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import kernel_profile
from benchmarks.kernel_profile import copy_bandwidth_gbps, format_row, main


def row(communication=0.0, **split):
    """A one-GPU shape (no communication kernel) unless communication (seconds) is given."""
    return {"name": "h200 profile", "step_s": 0.5, "tokens_per_step": 8192,
            "shares": {"matmul": 0.6, "memory": 0.25, "communication": communication / 0.5,
                       "idle": 0.15 - communication / 0.5},
            "split": {"kernel_s": {"matmul": 0.3, "memory": 0.125, "communication": communication}, "kernels": 1234,
                      "communication_s": {"alone": 0.0, "under_compute": 0.0}, **split}}


def test_a_shapes_line_gives_its_step_time_tokens_a_second_and_each_class_share():
    # 8,192 tokens in 0.5 s = 16,384 tok/s.
    assert format_row(row()) == ("h200 profile: 0.500 s/step, 16,384 tok/s; matmul 60.0% (0.300 s), memory 25.0% "
                                 "(0.125 s), communication 0.0%, idle 15.0%; 1234 kernels")


def test_a_shape_with_communication_says_how_much_ran_alone_and_how_much_under_compute():
    line = format_row(row(0.025, communication_s={"alone": 0.0042, "under_compute": 0.0208}))
    assert "communication 5.0%, idle 10.0%" in line.splitlines()[0]
    assert line.splitlines()[1] == "  communication: 4.2 ms alone (the step waited), 20.8 ms under compute kernels"


def test_the_idle_time_is_printed_before_between_and_after_the_kernels_in_ms():
    line = format_row(row(idle_before_first_kernel_s=0.0015,
                          idle_between_kernels_s=0.012, idle_after_last_kernel_s=0.0003))
    assert line.splitlines()[1] == ("  idle (profiled step): 1.5 ms before the first kernel, 12.0 ms between kernels, "
                                    "0.3 ms after the last")


def test_a_gap_and_a_copy_to_the_host_name_where_and_what_launched_them():
    gap = {"s": 0.00125, "at_s": 0.0301, "after": "nvjet_gemm", "before": "ncclDevKernel_AllGather",
           "host": ["aten::item", "train_step", "ignored"], "waited_for_launch_by": []}
    copy = {"at_s": 0.2, "launched_by": ["aten::_local_scalar_dense", "aten::item"]}
    lines = format_row(row(gaps=[gap], copies_to_host=[copy])).splitlines()
    # Without communication kernels no communication line is printed.
    assert lines[1:] == [
        "  gap 1.25 ms at 30.1 ms: nvjet_gemm -> ncclDevKernel_AllGather; host: aten::item, train_step; launched by: -",
        "  copy to the host at 200.0 ms, asked by: aten::_local_scalar_dense, aten::item"]


def test_a_failed_shapes_line_is_its_name_and_error():
    assert format_row({"name": "fp8", "error": "RuntimeError: no FP8"}) == "fp8: RuntimeError: no FP8"


def test_copy_bandwidth_counts_the_bytes_read_and_written_over_the_median_copy_time(event_ms):
    event_ms.extend([3.0, 2.0, 1.0])  # copies timed at 3, 2 and 1 ms; the median is 2 ms
    # 2**-20 GiB = 1,024 bytes = 512 bf16 values; read and written: 2,048 bytes in 2 ms = 1.024e6 B/s = 0.001024 GB/s.
    assert copy_bandwidth_gbps(torch.device("cpu"), gib=2**-20, repeats=3) == pytest.approx(0.001024)


def test_a_failing_shape_is_written_as_its_error_and_the_next_shape_still_runs(tmp_path, capsys, monkeypatch):
    def profile_shape(shape, *args):
        if shape is kernel_profile.SHAPES[0]:
            raise RuntimeError("x" * 400)
        return {"name": shape.name, "error": "ran"}

    monkeypatch.setattr(kernel_profile, "profile_shape", profile_shape)
    assert main(["--model", "tiny", "--out", str(tmp_path), "--shapes", "0,1"]) == 0
    shapes = json.loads((tmp_path / "kernel-profile.json").read_text())["shapes"]
    # The error is cut at 300 characters of its message.
    assert shapes == [{"name": kernel_profile.SHAPES[0].name, "error": "RuntimeError: " + "x" * 300},
                      {"name": kernel_profile.SHAPES[1].name, "error": "ran"}]
    assert capsys.readouterr().out.splitlines()[1] == f"{kernel_profile.SHAPES[1].name}: ran"


def test_only_the_five_largest_gaps_are_printed():
    # split_trace keeps the largest first; six listed, the smallest (0.5 ms) is left out of the line.
    gaps = [{"s": ms / 1e3, "at_s": 0.0, "after": "a", "before": "b", "host": [], "waited_for_launch_by": []}
            for ms in (6, 5, 4, 3, 2, 0.5)]
    lines = format_row(row(gaps=gaps)).splitlines()[1:]
    assert [line.split(" ms")[0] for line in lines] == ["  gap 6.00", "  gap 5.00", "  gap 4.00", "  gap 3.00", "  gap 2.00"]
