"""The kernel profile that calibrates the planner's two rooflines (benchmarks/kernel_profile.py)."""

from __future__ import annotations

import json

import pytest

from benchmarks.kernel_profile import STEP_LABEL, communication_overlap, kernel_class, main, shares, split_trace
from tests.process_group import spawn


@pytest.mark.parametrize("name,expected", [
    # Kernel names from the H200 run (docs/bench-results/2026-11-30-h200-kernel-profile.json) and cuBLAS/NCCL.
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
     "matmul"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "matmul"),  # an L4/A100 cuBLAS kernel
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0", "matmul"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>",
     "matmul"),
    ("triton_tem_fused_mm_0", "matmul"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "memory"),  # RMSNorm
    ("triton_poi_fused__unsafe_view_mul_silu_4", "memory"),  # SwiGLU
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>>",
     "memory"),  # the optimizer
    ("Memcpy DtoD (Device -> Device)", "memory"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication"),
    # Memory-bound though their names say attention or GEMM: flash attention 2's backward helpers (Ampere/Ada),
    # an inductor pointwise kernel named after SDPA, cuBLAS's split-K reduction.
    ("void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8>>(Flash_bwd_params)", "memory"),
    ("void flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8>>(Flash_bwd_params, int)", "memory"),
    ("void flash_bwd_clear_dkvaccum_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8>>(Flash_bwd_params)", "memory"),
    ("triton_poi_fused__scaled_dot_product_efficient_attention_transpose_2", "memory"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>(cublasLt::cublasSplitKParams<float>)",
     "memory"),
])
def test_kernels_are_classed_by_what_bounds_them(name, expected):
    assert kernel_class(name) == expected


def _kernel(name: str, start_us: float, duration_us: float, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": start_us, "dur": duration_us}


def test_a_trace_splits_into_class_seconds_and_busy_time_counts_overlap_once():
    """A 300 us GEMM, a 100 us norm overlapping its last 50 us on another stream, a 50 us copy after a gap, and a
    CPU op that is no kernel: matmul 300 us, memory 150 us, busy 300 + 50 + 50 = 400 us (the overlap once)."""
    events = [_kernel("nvjet_sm90_tst_192x192", 0, 300), _kernel("triton_red_fused_rsqrt_0", 250, 100),
              _kernel("Memcpy DtoD (Device -> Device)", 500, 50, cat="gpu_memcpy"),
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 900}]
    split = split_trace(events)
    assert split["kernel_s"] == pytest.approx({"matmul": 300e-6, "memory": 150e-6, "communication": 0.0})
    assert split["busy_s"] == pytest.approx(400e-6) and split["kernels"] == 3
    assert [k["name"] for k in split["top"]] == ["nvjet_sm90_tst_192x192", "triton_red_fused_rsqrt_0",
                                                "Memcpy DtoD (Device -> Device)"]


def test_communication_is_split_into_the_time_it_ran_alone_and_the_time_it_ran_under_compute():
    """An all-gather 0-100 us before any compute (alone 100), a reduce-scatter 300-500 beside a GEMM 200-400 (under
    compute 100, then alone 100) and a norm 450-480 (under compute 30 of those last 100: alone 70), a second
    collective 450-460 on a third stream inside the same stretch (counted once), and a GEMM alone 600-700:
    alone 100 + 70 = 170 us, under compute 100 + 30 = 130 us."""
    kernels = [(0, 100e-6, "ncclDevKernel_AllGather_RING_LL"), (200e-6, 400e-6, "nvjet_sm90_tst_192x192"),
               (300e-6, 500e-6, "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"), (450e-6, 480e-6, "triton_red_fused_rsqrt_0"),
               (450e-6, 460e-6, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"), (600e-6, 700e-6, "nvjet_sm90_tst_256x128")]
    overlap = communication_overlap(kernels)
    assert overlap == pytest.approx({"alone": 170e-6, "under_compute": 130e-6})


def test_a_trace_without_communication_has_none_alone_or_under_compute():
    split = split_trace([_kernel("nvjet_sm90_tst_192x192", 0, 300), _kernel("triton_red_fused_rsqrt_0", 250, 100)])
    assert split["communication_s"] == {"alone": 0.0, "under_compute": 0.0}


def test_idle_time_is_placed_before_between_and_after_the_kernels_with_the_host_work_of_each_gap():
    """A 1,000 us step: kernels at 100-300, 250-350 (overlapping), 500-550 and 900-950. Idle: 100 us before, 50 after,
    and two gaps between, longest first: 550-900 (350 us) and 350-500 (150 us), during which the host ran an
    FSDP hook (360-480, inside a 0-1000 compiled region: the innermost span is named first)."""
    split = split_trace(_step_with_gaps())
    assert split["idle_before_first_kernel_s"] == pytest.approx(100e-6)
    assert split["idle_after_last_kernel_s"] == pytest.approx(50e-6)
    assert split["idle_between_kernels_s"] == pytest.approx(500e-6)
    assert [(round(g["s"] * 1e6), round(g["at_s"] * 1e6), g["after"], g["before"]) for g in split["gaps"]] == [
        (350, 450, "Memcpy DtoH (Device -> Pinned)", "gemm_d"), (150, 250, "norm_b", "Memcpy DtoH (Device -> Pinned)")]
    assert split["gaps"][1]["host"] == ["FSDP::pre_forward", "Torch-Compiled Region"]
    assert split["gaps"][0]["host"] == ["Torch-Compiled Region"]


def test_a_gap_and_a_copy_to_the_host_name_the_host_code_that_launched_them():
    """The kernel after each gap and each copy to the host are traced back, by their correlation ids, to the
    runtime call that launched them and the host spans around it, innermost first."""
    split = split_trace(_step_with_gaps())
    assert split["gaps"][0]["waited_for_launch_by"] == ["model.py(10): forward", "Torch-Compiled Region"]
    assert split["gaps"][1]["waited_for_launch_by"] == ["aten::item", "data.py(7): count", "Torch-Compiled Region"]
    assert split["copies_to_host"] == [{"at_s": pytest.approx(400e-6),
                                    "launched_by": ["aten::item", "data.py(7): count", "Torch-Compiled Region"]}]


# Two steps traced back to back: the first's host span 0-290 us, the second's 300-500 us.
TWO_STEP_SPANS = [{"ph": "X", "cat": "user_annotation", "name": STEP_LABEL, "ts": 0, "dur": 290},
                  {"ph": "X", "cat": "user_annotation", "name": STEP_LABEL, "ts": 300, "dur": 200}]


def _launched(name: str, correlation: int, at: float, start: float, duration: float) -> list[dict]:
    """A kernel and the runtime call that launched it at `at`, tied by their correlation id."""
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": at, "dur": 1,
             "args": {"correlation": correlation}},
            {**_kernel(name, start, duration), "args": {"correlation": correlation}}]


def test_of_two_steps_back_to_back_the_second_is_split_with_the_idle_time_since_the_firsts_last_kernel():
    """Step 1's host span launches a 0-400 us GEMM (its update, still running when step 2's span opens at 300) and,
    queued behind it, a 400-440 us copy that starts after step 2's span opened; step 2's span launches kernels at
    450-500 and 520-600. Step 2 alone (kernels assigned by who launched them, not by when they ran): 130 us of
    kernels, GPU idle 10 us before its first (440 -> 450) and 20 us between its two."""
    events = [*TWO_STEP_SPANS,
              *_launched("adamw", 1, 10, 0, 400), *_launched("copy", 4, 20, 400, 40),
              *_launched("gemm_a", 2, 310, 450, 50), *_launched("norm_b", 3, 320, 520, 80)]
    split = split_trace(events)
    assert split["kernels"] == 2 and split["busy_s"] == pytest.approx(130e-6)
    assert split["idle_before_first_kernel_s"] == pytest.approx(10e-6)
    assert split["idle_between_kernels_s"] == pytest.approx(20e-6) and "idle_after_last_kernel_s" not in split


def test_the_idle_time_before_a_step_counts_from_the_previous_steps_last_kernel_to_end():
    """The previous step's update runs 0-400 us and, on another stream, a kernel it launched later runs 100-150 us:
    the GPU is idle from 400 us (the last to end, not the last to start) to the step's first kernel at 450 us."""
    events = [*TWO_STEP_SPANS,
              *_launched("adamw", 1, 10, 0, 400), *_launched("side", 2, 20, 100, 50),
              *_launched("gemm_a", 3, 310, 450, 50)]
    assert split_trace(events)["idle_before_first_kernel_s"] == pytest.approx(50e-6)


def test_a_gap_is_placed_after_the_kernel_that_ended_last_and_only_copies_to_the_host_are_listed_as_such():
    """A long kernel at 100-500 us with a short one inside it (200-250 us), the next kernel at 600 us: the 100 us gap
    follows the long kernel. Copies device to device and host to device are no copies to the host."""
    events = [_kernel("long", 100, 400), _kernel("short", 200, 50), _kernel("next", 600, 10),
              _kernel("Memcpy DtoD (Device -> Device)", 700, 10, cat="gpu_memcpy"),
              _kernel("Memcpy HtoD (Pinned -> Device)", 720, 10, cat="gpu_memcpy")]
    split = split_trace(events)
    assert [(round(g["s"] * 1e6), g["after"], g["before"]) for g in split["gaps"]][0] == (100, "long", "next")
    assert split["copies_to_host"] == []


def _step_with_gaps() -> list[dict]:
    def host(cat: str, name: str, start: float, duration: float) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "ts": start, "dur": duration}

    def launch(correlation: int, at: float) -> dict:
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": at, "dur": 2,
                "args": {"correlation": correlation}}

    kernels = [_kernel("gemm_a", 100, 200), _kernel("norm_b", 250, 100),
               _kernel("Memcpy DtoH (Device -> Pinned)", 500, 50, cat="gpu_memcpy"), _kernel("gemm_d", 900, 50)]
    for correlation, kernel in enumerate(kernels, 1):
        kernel["args"] = {"correlation": correlation}
    return [host("user_annotation", STEP_LABEL, 0, 1000), host("cpu_op", "Torch-Compiled Region", 0, 1000),
            host("user_annotation", "FSDP::pre_forward", 360, 120),
            host("python_function", "data.py(7): count", 481, 15), host("cpu_op", "aten::item", 482, 13),
            host("python_function", "model.py(10): forward", 870, 20),
            launch(1, 50), launch(2, 60), launch(3, 485), launch(4, 880), *kernels]


def test_shares_are_of_the_wall_time_with_overlap_scaled_out_and_the_rest_idle():
    """Busy 400 us of 450 us summed (an overlap of 50): classes scaled by 400/450; over a 1,000 us step,
    matmul 300 x 0.889 = 26.7%, memory 150 x 0.889 = 13.3%, idle 60%."""
    split = {"kernel_s": {"matmul": 300e-6, "memory": 150e-6, "communication": 0.0}, "busy_s": 400e-6}
    assert shares(split, 1000e-6) == pytest.approx({"matmul": 0.26667, "memory": 0.13333, "communication": 0.0,
                                                    "idle": 0.6}, rel=1e-4)


def test_the_profile_runs_on_cpu_and_writes_what_it_measured(tmp_path):
    """No GPU: the step runs and is timed, no kernel is recorded (the split is the GPU's to fill)."""
    assert main(["--model", "tiny", "--out", str(tmp_path), "--shapes", "0", "--warmup", "1", "--steps", "1"]) == 0
    [row] = json.loads((tmp_path / "kernel-profile.json").read_text())["shapes"]
    assert row["settings"]["micro_batch"] == 1 and row["settings"]["activation_checkpointing"] == "full"
    assert row["tokens_per_step"] == 4 * 2048 and row["step_s"] > 0 and row["split"]["kernels"] == 0


def test_the_step_time_is_the_benchmarks_back_to_back_mean(tmp_path, monkeypatch):
    """The profile times its steps with benchmarks.worker.time_steps (0.5 s here), not its warm-up (9 s)."""
    from benchmarks import worker
    monkeypatch.setattr(worker, "time_steps", lambda step, warmup, steps, device: {"step_time_s": 0.5, "warmup_s": 9.0})
    assert main(["--model", "tiny", "--out", str(tmp_path), "--shapes", "0", "--warmup", "1", "--steps", "1"]) == 0
    [row] = json.loads((tmp_path / "kernel-profile.json").read_text())["shapes"]
    assert row["step_s"] == 0.5


def test_an_out_folder_that_cannot_be_written_is_refused_in_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["--out", str(blocker / "sub")]) == 2
    assert capsys.readouterr().err.startswith(f"error: --out: '{blocker / 'sub'}' is not a writable folder (")


@pytest.mark.parametrize("shapes", ["9", "0,x", "-1"])
def test_a_shape_index_out_of_range_is_refused_in_one_line(shapes, tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--shapes", shapes]) == 2
    assert capsys.readouterr().err == f"error: --shapes: {shapes!r} must be comma-separated indexes from 0 to 8\n"


def _profile_rank(rank: int, world: int, port: int, out: str) -> None:
    import os

    import torch

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    code = main(["--model", "tiny", "--out", f"{out}/rank{rank}", "--shapes", "4", "--warmup", "1", "--steps", "1"])
    assert code == 0


def test_under_torchrun_every_rank_steps_and_rank_0_alone_writes_the_two_rank_profile(tmp_path):
    """Two gloo ranks (torchrun's environment): the FSDP step shards over both (its collectives would hang
    otherwise), and only rank 0's folder gets the profile, which names its world size."""
    
    from benchmarks.kernel_profile import _free_port

    for rank in (0, 1):
        (tmp_path / f"rank{rank}").mkdir()
    spawn(_profile_rank, args=(2, _free_port(), str(tmp_path)), nprocs=2)
    written = json.loads((tmp_path / "rank0" / "kernel-profile.json").read_text())
    assert written["world_size"] == 2 and written["shapes"][0]["world_size"] == 2
    assert written["shapes"][0]["step_s"] > 0
    assert not (tmp_path / "rank1" / "kernel-profile.json").exists()


def test_the_converted_linears_gemms_are_timed_at_their_shapes_in_bf16_and_fp8(monkeypatch):
    import torch

    from benchmarks import worker

    ran = []

    def once(run, repeats):  # the CPU runs both kinds of GEMM (torch's _scaled_mm too); 1 ms each
        ran.append(run())
        return 1e-3

    monkeypatch.setattr(worker, "_median_seconds", once)
    rates = worker.linear_gemm_rates(torch.device("cpu"), "tiny", (8,))
    # The tiny model: hidden 64, intermediate 128. down_proj's weight gradient: (64 out x 8 tokens) @ (8 x 128 in).
    assert sorted(rates["8"]) == sorted(f"{layer} {gemm}" for layer in ("q_proj/o_proj", "gate_proj/up_proj", "down_proj")
                                        for gemm in ("forward", "grad_input", "grad_weight"))
    assert rates["8"]["down_proj grad_weight"] == {"gflop": 2 * 64 * 8 * 128 / 1e9, "bf16": 2 * 64 * 8 * 128 / 1e-3 / 1e12,
                                                   "fp8": 2 * 64 * 8 * 128 / 1e-3 / 1e12}
    assert {tuple(r.shape) for r in ran} >= {(64, 128), (8, 64), (8, 128)}
    assert {r.dtype for r in ran} == {torch.bfloat16}
