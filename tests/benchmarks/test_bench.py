"""The GPU benchmark's logic without a GPU: FLOP counting, the plan, the report, and a CPU run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from benchmarks import bench, levers, report, suites, worker
from training.command_line import parse_args
from training.config import GPU_PROFILES, ConfigError
from training.metrics import model_flops_per_token
from tests.process_group import spawn

QWEN_1_5B_PARAMS = 1_543_714_304  # Qwen2.5-1.5B's published count (tied embedding counted once)


def test_qwen_flops_per_token_is_6n_plus_attention():
    cfg = suites.Case("x").train_config(suites.BENCH_MODEL)
    expected = 6 * QWEN_1_5B_PARAMS + 12 * 28 * 12 * 128 * 4096
    assert model_flops_per_token(worker._meta_model(cfg), 4096) == expected


def example_row(**overrides) -> dict:
    row = {"name": "trainer", "recipe": "trainer", "group": "main", "world_size": 2,
           "settings": {"micro_batch": 8, "seq_len": 4096}, "tokens_per_step_per_gpu": 32768,
           "step_time_s": 0.65, "flops_per_token": 11.376e9, "peak_mem_gib": 82.1}
    return row | overrides


def test_summarize_turns_step_time_into_tokens_tflops_and_mfu():
    row = report.summarize(example_row(), measured_peak=790.0, datasheet_peak=989.0)
    assert row["tokens_per_s_per_gpu"] == pytest.approx(32768 / 0.65)
    assert row["tflops_per_gpu"] == pytest.approx(32768 / 0.65 * 11.376e9 / 1e12)
    assert row["mfu_measured"] == pytest.approx(row["tflops_per_gpu"] / 790.0)
    assert row["mfu_datasheet"] == pytest.approx(row["tflops_per_gpu"] / 989.0)


def test_summarize_keeps_an_out_of_memory_case_without_figures():
    row = report.summarize(example_row(error="out of memory"), 790.0, 989.0)
    assert row["tokens_per_s_per_gpu"] is None and "mfu_measured" not in row


def test_table_has_one_row_per_case_and_shows_errors():
    rows = [report.summarize(example_row(), 790.0, 989.0),
            report.summarize(example_row(name="example", recipe="example", error="out of memory"), 790.0, 989.0)]
    table = report.format_table(rows).splitlines()
    assert len(table) == 4
    assert "| trainer | 2 | 8 x 4096 | 50,412 | 573.5 | 72.6% | 58.0% | 82.1 | 650 |" == table[2]
    assert "out of memory" in table[3]


def test_comparisons_give_the_ratios_side_by_side():
    rows = [report.summarize(r, 790.0, None) for r in (
        example_row(),
        example_row(name="example", recipe="example", step_time_s=6.5),
        example_row(name="sockets", group="sockets", step_time_s=1.3),
        example_row(name="one GPU", group="world1", world_size=1, step_time_s=0.6),
    )]
    lines = report.comparisons(rows)
    assert "trainer default / example: 10.0x tokens/s per GPU" in lines
    assert "normal NCCL path / sockets only: 2.00x tokens/s per GPU" in lines
    assert "scaling 1 -> 2 GPUs: 92.3% of one GPU's tokens/s per GPU" in lines


def test_full_plan_has_the_baseline_the_l4_cap_the_sockets_ab_and_one_gpu():
    groups = {g.name: g for g in suites.plan("full", gpus=2)}
    example = [c for c in groups["main"].cases if c.recipe == "example"]
    shapes = {(c.overrides["micro_batch"], c.overrides["seq_len"]) for c in example}
    assert (1, 128) in shapes and (GPU_PROFILES["h200"]["micro_batch"], GPU_PROFILES["h200"]["seq_len"]) in shapes
    assert groups["l4-world2"].world_size == 2 and groups["l4-world2"].cases[0].memory_cap_gib == 22.0
    assert groups["l4-world2"].cases[0].profile == "l4"
    assert groups["sockets"].env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    assert groups["world1"].world_size == 1


def test_plan_on_eight_gpus_adds_the_l4_profile_at_world_size_eight():
    groups = {g.name: g for g in suites.plan("full", gpus=8)}
    assert groups["l4-world2"].world_size == 2 and groups["l4-world8"].world_size == 8
    assert groups["l4-world8"].cases[0].memory_cap_gib == 22.0 and groups["main"].world_size == 8


def test_l4_suite_sets_the_lever_against_the_profile_on_both_transports():
    groups = {g.name: g for g in suites.plan("l4", gpus=8)}
    assert set(groups) == {"l4-world2", "l4-world2-sockets", "l4-world8", "l4-world8-sockets"}
    default, kept = groups["l4-world8"].cases
    assert kept.overrides == {"reshard_after_forward": False} and not default.overrides
    assert groups["l4-world8-sockets"].env == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}


def test_plan_on_one_gpu_has_no_scaling_group():
    assert "world1" not in {g.name for g in suites.plan("full", gpus=1)}


def test_every_planned_case_is_a_valid_trainer_config():
    for suite in ("full", "variants", "smoke", "mfu", "accumulation", "layouts"):
        for group in suites.plan(suite, gpus=2):
            for case in group.cases:
                case.train_config(suites.BENCH_MODEL)  # raises ConfigError when a variant is malformed


def test_profile_sets_defaults_and_explicit_options_win():
    cfg = parse_args(["--profile", "l4", "--micro-batch", "2"])
    assert cfg.seq_len == GPU_PROFILES["l4"]["seq_len"] and cfg.activation_checkpointing
    assert cfg.micro_batch == 2


def test_unknown_profile_is_refused():
    with pytest.raises(ConfigError, match=r"--profile: 'a100' is not one of h200, l4"):
        parse_args(["--profile", "a100"])


def test_cluster_defaults_are_the_l4_profile_with_its_shape_left_to_auto():
    from stacks.settings import Settings, TrainingSettings

    t = TrainingSettings()
    for key, value in GPU_PROFILES["l4"].items():
        if key in ("micro_batch", "activation_checkpointing"):  # planning.plan picks them for the nodes
            assert getattr(t, key) == "auto", key
        elif key != "grad_accum":  # per GPU in the profile; the cluster sets the global batch
            assert getattr(t, key) == value, key
    # The profile's batch: 1 x 2,048 tokens x 4 micro-batches on each of the default 2 x 4 GPUs.
    assert t.batch_tokens == 1 * 2048 * 4 * Settings().training_workers == 65_536


def test_bad_model_is_one_line(capsys):
    assert bench.main(["--model", "llama", "--cpu"]) == 2
    assert capsys.readouterr().err.strip() == "error: --model: 'llama' is not a built-in config (qwen2.5-1.5b, qwen2.5-7b, qwen2.5-14b, tiny)"


def run_bench(out, *argv: str) -> list[dict]:
    """`python -m benchmarks.bench --cpu` with the tiny model: the results' cases."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench", "--cpu", "--model", "tiny", "--out", str(out), *argv],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((out / "results.json").read_text())["cases"]


@pytest.fixture(scope="module")
def smoke_in_rounds(tmp_path_factory):
    """The whole launcher -> torchrun -> worker -> report path on CPU (gloo), the smoke suite twice in turn: one run
    of the 8 x 4096 case takes tens of seconds here, so the tests below share it."""
    out = tmp_path_factory.mktemp("bench")
    return run_bench(out, "--suite", "smoke", "--warmup", "1", "--steps", "2", "--rounds", "2"), out


def test_cpu_run_writes_results_and_table(smoke_in_rounds):
    cases, out = smoke_in_rounds
    trainer, example = cases[:2]
    assert trainer["tokens_per_s_per_gpu"] > 0 and trainer["steps_timed"] == 2
    assert trainer["final_loss"] == pytest.approx(6.3, abs=0.5)  # random tokens: about ln(512)
    assert example["error"] == "FSDP1 needs a GPU"
    assert "| trainer, h200 profile (default), round 1 | 1 | 8 x 4096 |" in (out / "table.md").read_text()


def test_rounds_run_the_cases_in_turn_and_the_table_ends_with_each_cases_median(smoke_in_rounds):
    cases, out = smoke_in_rounds
    assert [c["name"] for c in cases] == [
        "trainer, h200 profile (default), round 1", "example recipe at its shape, round 1",
        "trainer, h200 profile (default), round 2", "example recipe at its shape, round 2"]
    assert "- trainer, h200 profile (default): median " in (out / "table.md").read_text()


def test_chosen_cases_keep_only_those_named(tmp_path):
    """--cases keeps the example's case of the smoke suite and drops the trainer's (on CPU the example's case ends
    at once: FSDP1 needs a GPU)."""
    cases = run_bench(tmp_path / "bench", "--suite", "smoke", "--warmup", "1", "--steps", "1",
                      "--cases", "example recipe at its shape")
    assert [c["name"] for c in cases] == ["example recipe at its shape"]


@pytest.mark.parametrize("argv,message", [
    (["--cpu", "--gpus", "0"], "error: --gpus: 0 must be at least 1"),
    (["--cpu", "--gpus", "-2"], "error: --gpus: -2 must be at least 1"),
    (["--cpu", "--model", "tiny", "--suite", "smoke", "--groups", "main,nope"],
     "error: --groups: nope not in suite smoke on 1 GPU(s); its groups: main"),
    (["--cpu", "--warmup", "0"], "error: --warmup/--steps: 0/10 must both be at least 1"),
    (["--cpu", "--rounds", "0"], "error: --rounds: 0 must be at least 1"),
    (["--cpu", "--model", "tiny", "--suite", "smoke", "--cases", "trainer, h200 profile (default)|nope"],
     "error: --cases: nope not in the selected groups; their cases: trainer, h200 profile (default) | example recipe at its shape"),
])
def test_bad_benchmark_options_are_one_line_before_anything_runs(tmp_path, capsys, argv, message):
    assert bench.main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "out" / "results.json").exists()


def test_out_that_is_a_file_is_one_line_before_anything_runs(tmp_path, capsys):
    taken = tmp_path / "results.txt"
    taken.write_text("an earlier run's notes")
    assert bench.main(["--cpu", "--out", str(taken)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out: {str(taken)!r} is not a writable folder (it is a file)"
    assert taken.read_text() == "an earlier run's notes"


def test_out_below_a_file_is_one_line_before_anything_runs(tmp_path, capsys):
    (tmp_path / "notes").write_text("")
    out = tmp_path / "notes" / "bench"
    assert bench.main(["--cpu", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --out: {str(out)!r} is not a writable folder (Not a directory)"


def test_every_lora_case_is_a_valid_trainer_config_of_its_own_model():
    cases = [case for group in suites.plan("lora", gpus=2) for case in group.cases]
    configs = [case.train_config(case.model) for case in cases]
    assert {(c.model, c.lora_rank > 0, c.profile) for c in configs} == {
        (m, lora, p) for m in ("qwen2.5-1.5b", "qwen2.5-7b") for lora in (False, True) for p in ("h200", "l4")}


def test_a_lora_case_runs_through_the_launcher_on_cpu(tmp_path):
    """run_group -> torchrun -> worker with a LoRA case of another model than --model (tiny on CPU, gloo)."""
    import argparse

    out = tmp_path / "bench"
    (out / "results").mkdir(parents=True)
    group = suites.Group("lora", 1, [suites.Case("tiny LoRA", model="tiny", overrides={
        "lora_rank": 4, "compile": False, "micro_batch": 1, "seq_len": 256})])
    args = argparse.Namespace(gpus=1, model="qwen2.5-1.5b", warmup=1, steps=2, site=None)
    assert bench.run_group(group, out, args) == 0, (out / "group-lora.log").read_text()[-2000:]
    [result] = [json.loads(p.read_text()) for p in (out / "results").glob("lora-*.json")]
    assert "error" not in result and result["settings"]["model"] == "tiny" and result["steps_timed"] == 2
    assert result["final_loss"] == pytest.approx(6.3, abs=0.5)  # random tokens: about ln(512)


def _without(package: str, tmp_path, monkeypatch) -> None:
    """`package` not installed, and no wheels to install it from."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    monkeypatch.setattr(bench, "WHEELS", tmp_path / "no-wheels")


@pytest.mark.parametrize("suite, package", [("lora", "peft"), ("mfu", "liger_kernel")])
def test_a_suite_without_its_package_or_wheels_is_one_line(suite, package, tmp_path, monkeypatch, capsys):
    _without(package, tmp_path, monkeypatch)
    assert bench.main(["--cpu", "--suite", suite, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --suite {suite}: {package} is not installed and "
                                               f"{tmp_path / 'no-wheels'} holds no wheels (make bench-wheels, then carry .whl)")


# ------------------------------------------------------------------ --suite mfu: the levers and the peer


def test_mfu_suite_undoes_each_kept_change_alone_and_runs_the_peer_in_its_own_process():
    groups = {g.name: g for g in suites.plan("mfu", gpus=2)}
    main = [(c.name, c.levers) for c in groups["main"].cases]
    assert main[0] == ("trainer, h200 profile (default)", ())
    assert sorted(levers for _, levers in main[1:]) == [(), ("copied-accumulation",), ("host-guard",),
                                                       ("host-guard", "copied-accumulation"), ("read-after-update",),
                                                       ("read-after-update", "transformers-masks"),
                                                       ("transformers-masks",)]
    assert groups["main"].cases[-1].overrides == {"reduce_dtype": "bf16"}
    # Liger patches Hugging Face's Qwen2 classes for the whole process: the peer runs alone.
    assert [c.recipe for c in groups["peer"].cases] == ["liger"]
    every = [name for g in groups.values() for c in g.cases for name in c.levers]
    assert set(every) <= set(levers.LEVERS) and "liger-kernels" in every


def test_a_lever_is_compared_with_the_default_of_its_own_group():
    """Ratios and loss gaps by hand: main default 50,000 tok/s; a lever at 50,500 (1.010x) whose losses
    differ by at most 0.002; a second group's own default at 40,000 and its lever at 30,000 (0.750x); a third
    group's baseline of another profile (its first case without levers) at 10,000 and its lever at 9,000."""
    settings = {"micro_batch": 8}
    default = {"name": "d", "group": "main", "recipe": "trainer", "levers": [], "settings": settings,
               "tokens_per_s_per_gpu": 50_000, "losses": [12.0, 11.5]}
    rows = [default,
            {"name": "fast", "group": "main", "recipe": "trainer", "levers": ["x"], "settings": settings,
             "tokens_per_s_per_gpu": 50_500, "losses": [12.002, 11.499]},
            {"name": "d", "group": "tried", "recipe": "trainer", "levers": [], "settings": settings,
             "tokens_per_s_per_gpu": 40_000, "losses": [12.0, 11.5]},
            {"name": "slow", "group": "tried", "recipe": "trainer", "levers": ["y"], "settings": settings,
             "tokens_per_s_per_gpu": 30_000, "losses": [12.0, 11.5]},
            {"name": "peer", "group": "peer", "recipe": "liger", "levers": [], "settings": settings,
             "tokens_per_s_per_gpu": 45_000, "losses": [12.0, 11.5]},
            {"name": "l4", "group": "l4-step", "recipe": "trainer", "levers": [], "settings": {"micro_batch": 1},
             "tokens_per_s_per_gpu": 10_000, "losses": [12.0, 11.0]},
            {"name": "l4 slow", "group": "l4-step", "recipe": "trainer", "levers": ["z"], "settings": {"micro_batch": 1},
             "tokens_per_s_per_gpu": 9_000, "losses": [12.0, 11.0]},
            # A later case of the main group without levers (another setting) is no baseline; nor is a process setting's
            # one case, compared with the main default.
            {"name": "bf16 wire", "group": "main", "recipe": "trainer", "levers": [], "settings": {"micro_batch": 8, "w": 1},
             "tokens_per_s_per_gpu": 45_000, "losses": [12.0, 11.5]},
            {"name": "8 ctas", "group": "nccl-max-8-ctas", "recipe": "trainer", "levers": [], "settings": settings,
             "tokens_per_s_per_gpu": 45_000, "losses": [12.0, 11.5]}]
    assert report.lever_lines(default, rows) == [
        "fast: 1.010x the default's tokens/s (main group), largest loss gap 0.0020, attention n/a",
        "slow: 0.750x the default's tokens/s (tried group), largest loss gap 0.0000, attention n/a",
        "l4 slow: 0.900x the default's tokens/s (l4-step group), largest loss gap 0.0000, attention n/a",
        "bf16 wire: 0.900x the default's tokens/s (main group), largest loss gap 0.0000, attention n/a",
        "8 ctas: 0.900x the default's tokens/s (main group), largest loss gap 0.0000, attention n/a"]


def test_steps_are_timed_back_to_back_each_from_the_previous_ones_return(monkeypatch):
    """A step that takes 20 ms on the host and returns 5, 4, 3, 2: one warm-up and three timed steps of 20 ms each
    (not growing), losses in order, the final one the last step's."""
    import torch.distributed

    clock = iter([0.0, 0.5, 1.0, 1.02, 1.04, 1.06, 1.06])  # warm-up start, end; the timed start, 3 returns, end
    monkeypatch.setattr(worker.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(torch.distributed, "barrier", lambda: None)
    losses = iter([5.0, 4.0, 3.0, 2.0])
    timed = worker.time_steps(lambda i: next(losses), warmup=1, steps=3, device=torch.device("cpu"))
    assert timed["losses"] == [5.0, 4.0, 3.0, 2.0] and timed["final_loss"] == 2.0 and timed["first_loss"] == 5.0
    assert timed["step_time_s"] == pytest.approx(0.02)
    assert timed["step_time_min_s"] == pytest.approx(0.02) and timed["step_time_max_s"] == pytest.approx(0.02)


def test_rounds_run_a_groups_cases_in_turn():
    group = suites.Group("l4-step", 1, [suites.Case("a"), suites.Case("b", levers=("no-automatic-gc",))])
    (once,) = suites.with_rounds([group], 1)
    (thrice,) = suites.with_rounds([group], 3)
    assert [c.name for c in once.cases] == ["a", "b"]
    assert [c.name for c in thrice.cases] == ["a, round 1", "b, round 1", "a, round 2", "b, round 2", "a, round 3",
                                              "b, round 3"]
    assert [c.levers for c in thrice.cases] == [(), ("no-automatic-gc",)] * 3


def test_a_case_in_rounds_is_its_median_against_the_median_of_the_groups_first_case():
    """a: 100, 300, 200 (median 200); b: 90, 250, 270 (median 250): b is 1.25x a, a one-round case is left out."""
    rates = {"a, round 1": 100.0, "b, round 1": 90.0, "a, round 2": 300.0, "b, round 2": 250.0, "a, round 3": 200.0,
             "b, round 3": 270.0, "c": 500.0}
    rows = [{"group": "g", "name": name, "tokens_per_s_per_gpu": rate} for name, rate in rates.items()]
    assert report.round_lines(rows) == [
        "a: median 200 tokens/s/GPU over 3 rounds (100-300), 1.000x the group's first case",
        "b: median 250 tokens/s/GPU over 3 rounds (90-270), 1.250x the group's first case"]


def test_rounds_are_medians_per_group_leaving_out_errors_and_single_rounds():
    """Group g: a 100, 200, 300 (median 200, last 300), "x, round trip" 150, 450 (median 300: 1.5x a); an errored round
    and a one-round case add nothing. Group h has its own first case: c 50, 70 (median 60), e 90, 90 (1.5x c)."""
    rates = {("g", "a, round 1"): 100.0, ("g", "x, round trip, round 1"): 150.0, ("g", "a, round 2"): 200.0,
             ("g", "x, round trip, round 2"): 450.0, ("g", "a, round 3"): 300.0, ("g", "x, round trip, round 3"): None,
             ("g", "d, round 1"): 80.0, ("h", "c, round 1"): 50.0, ("h", "e, round 1"): 90.0, ("h", "c, round 2"): 70.0,
             ("h", "e, round 2"): 90.0}
    rows = [{"group": group, "name": name, **({"tokens_per_s_per_gpu": rate} if rate else {"error": "out of memory"})}
            for (group, name), rate in rates.items()]
    assert report.round_lines(rows) == [
        "a: median 200 tokens/s/GPU over 3 rounds (100-300), 1.000x the group's first case",
        "x, round trip: median 300 tokens/s/GPU over 2 rounds (150-450), 1.500x the group's first case",
        "c: median 60 tokens/s/GPU over 2 rounds (50-70), 1.000x the group's first case",
        "e: median 90 tokens/s/GPU over 2 rounds (90-90), 1.500x the group's first case"]


@pytest.fixture
def planned(monkeypatch):
    """main with a two-group plan whose groups are recorded instead of run: (group, its case names) per group."""
    ran = []
    groups = [suites.Group("A", 1, [suites.Case("a1"), suites.Case("a2")]), suites.Group("B", 1, [suites.Case("b1")])]
    monkeypatch.setattr(bench, "plan", lambda suite, gpus: groups)
    monkeypatch.setattr(bench, "run_group", lambda group, out, args: ran.append((group.name, [c.name for c in group.cases])) or 0)
    monkeypatch.setattr(bench, "report", lambda out, groups, gpus: "")
    return ran


def test_cases_picks_cases_and_runs_only_the_groups_left_with_one(planned, tmp_path):
    assert bench.main(["--cpu", "--suite", "smoke", "--cases", "a2", "--rounds", "2", "--out", str(tmp_path)]) == 0
    assert planned == [("A", ["a2, round 1", "a2, round 2"])]


def test_rounds_apply_without_cases(planned, tmp_path):
    assert bench.main(["--cpu", "--suite", "smoke", "--rounds", "2", "--out", str(tmp_path)]) == 0
    assert planned == [("A", ["a1, round 1", "a2, round 1", "a1, round 2", "a2, round 2"]),
                       ("B", ["b1, round 1", "b1, round 2"])]


def test_cases_are_looked_up_in_the_chosen_groups_only(planned, tmp_path, capsys):
    assert bench.main(["--cpu", "--suite", "smoke", "--groups", "A", "--cases", "b1", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "error: --cases: b1 not in the selected groups; their cases: a1 | a2"
    assert planned == []


def test_the_gc_lever_turns_automatic_collection_off_inside_and_restores_it_even_after_an_error():
    import gc

    assert gc.isenabled() and gc.get_freeze_count() == 0
    with levers.LEVERS["no-automatic-gc"]():
        assert not gc.isenabled() and gc.get_freeze_count() > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError, match="inside"):
        with levers.LEVERS["no-automatic-gc"]():
            raise RuntimeError("inside")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def _case_then_collector(rank: int, store: str, out: str) -> None:
    import gc
    import weakref

    import torch.distributed as dist

    from tests.process_group import leave

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    built = []
    trainer_step = worker._trainer_step

    def recorded(*args, **kwargs):
        model, optimizer, step = trainer_step(*args, **kwargs)
        built.append(weakref.ref(model))
        return model, optimizer, step

    worker._trainer_step = recorded
    case = suites.Case("tiny", overrides={"seq_len": 16, "micro_batch": 2, "compile": False})
    cfg = case.train_config("tiny")
    gc.disable()  # only run_case's own collection may free the case: as in a step loop between automatic passes
    result = worker.run_case(case, cfg, torch.device("cpu"), 0, 1, None, warmup=1, steps=1)
    torch.save({"timed": result.get("steps_timed"), "error": result.get("error"), "alive": built[0]() is not None}, out)
    gc.enable()
    leave()


def test_a_case_leaves_nothing_behind_for_the_next_one(tmp_path):
    """The case's model is freed when run_case returns, with no automatic collection: the step closure holds it
    and FSDP's hooks make cycles, so a collection run before the closure is dropped kept the whole case alive
    (on a GPU, every case after a group's first showed the previous case's weights in its peak memory)."""
    
    out = tmp_path / "case.pt"
    spawn(_case_then_collector, args=(str(tmp_path / "store"), str(out)), nprocs=1)
    result = torch.load(out)
    assert result["error"] is None and result["timed"] == 1
    assert result["alive"] is False


def _communication_levers_configure(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    from tests.process_group import leave
    from training.model import build_model

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    calls = {}
    methods = ("set_force_sum_reduction_for_comms", "set_symm_mem_for_comm",
               "set_allocate_memory_from_process_group_for_comm")
    for method in methods:
        setattr(FSDPModule, method, lambda unit, *args, method=method: calls.setdefault(method, []).append(
            type(unit).__name__.removeprefix("FSDP")))
    cfg = suites.Case("tiny", overrides={"seq_len": 16, "micro_batch": 2, "compile": False}).train_config("tiny")
    for lever in ("symmetric-memory", "process-group-memory"):
        with levers.LEVERS[lever]():
            model = build_model(cfg, torch.device("cpu"), 0, 1)
        calls[lever] = {m: sorted(calls.pop(m, [])) for m in methods}
    calls["layers"] = len(model.decoder_layers)
    torch.save(calls, out)
    leave()


def test_each_communication_lever_configures_every_fsdp_unit_the_trainer_makes(tmp_path):
    """symmetric-memory: sum-only reductions and symmetric memory on each decoder layer and the root;
    process-group-memory: sum-only reductions and NCCL's allocator on the same units."""
    
    out = tmp_path / "calls.pt"
    spawn(_communication_levers_configure, args=(str(tmp_path / "store"), str(out)), nprocs=1)
    calls = torch.load(out)
    units = sorted(["CausalLMWithLoss"] + ["Qwen2DecoderLayer"] * calls["layers"])
    assert calls["layers"] >= 2
    assert calls["symmetric-memory"] == {"set_force_sum_reduction_for_comms": units, "set_symm_mem_for_comm": units,
                                         "set_allocate_memory_from_process_group_for_comm": []}
    assert calls["process-group-memory"] == {"set_force_sum_reduction_for_comms": units, "set_symm_mem_for_comm": [],
                                             "set_allocate_memory_from_process_group_for_comm": units}


def test_symmetric_memory_on_a_torch_without_it_is_refused_with_the_version(monkeypatch):
    """torch 2.11 (the GPU machine's image) has no set_symm_mem_for_comm: the case fails at once, saying why."""
    from torch.distributed.fsdp import FSDPModule

    monkeypatch.delattr(FSDPModule, "set_symm_mem_for_comm")
    with pytest.raises(RuntimeError, match=r"^symmetric-memory: torch .* has no FSDPModule.set_symm_mem_for_comm$"):
        levers.LEVERS["symmetric-memory"]()


def test_the_copy_engine_group_gathers_from_symmetric_memory_under_the_zero_cta_policy():
    [group] = [g for g in suites.plan("mfu", gpus=2) if g.name == "copy-engine-all-gather"]
    assert group.env == {"NCCL_CTA_POLICY": "2"}
    assert [c.levers for c in group.cases] == [("symmetric-memory",)]


# ------------------------------------------------------------------ the emulated link: model against measurement


def _layout_row(group: str, name: str, step_s: float, tokens_per_s: float) -> dict:
    settings = {"seq_len": 2048, "micro_batch": 1, "grad_accum": 4, "activation_checkpointing": True,
                "loss_chunk_tokens": 2048, "sharding": "hybrid", "reshard_after_forward": True, "reduce_dtype": "bf16"}
    return {"group": group, "name": name, "settings": settings, "step_time_s": step_s,
            "tokens_per_s_per_gpu": tokens_per_s, "flops_per_token": 6 * QWEN_1_5B_PARAMS + 12 * 28 * 12 * 128 * 2048}


def test_a_sockets_case_is_paired_with_its_nvlink_twin_and_the_twin_predicts_itself():
    """On a link a thousand times faster than the data, the model fed a case's own compute time must give
    back that case's measured step (within 1%); a sockets case with no NVLink twin is left out."""
    rows = [_layout_row("accumulation-nvlink", "hybrid, bf16 on the wire, grad_accum 4, NVLink", 0.7, 8192 / 0.7),
            _layout_row("accumulation-sockets", "hybrid, bf16 on the wire, grad_accum 4, sockets", 1.5, 8192 / 1.5),
            _layout_row("accumulation-sockets", "hybrid, fp32 on the wire, grad_accum 4, sockets", 2.1, 8192 / 2.1)]
    links = {"accumulation-nvlink": {"all_gather layer": {"busbw_gbps": 3000.0}},
             "accumulation-sockets": {"all_gather layer": {"busbw_gbps": 3.0}}}
    out = report.emulation_rows(rows, links, suites.BENCH_MODEL)
    assert [r["name"] for r in out] == [rows[0]["name"], rows[1]["name"]]
    assert out[0]["predicted_run_compute_step_s"] == pytest.approx(0.7, rel=0.01)
    assert out[1]["predicted_run_compute_step_s"] > 0.7  # the slow link adds to the same compute


def test_the_full_suite_runs_the_peer_beside_the_default_and_goes_on_without_liger(tmp_path, monkeypatch, capsys):
    assert [c.recipe for c in {g.name: g for g in suites.plan("full", gpus=2)}["peer"].cases] == ["liger"]
    _without("liger_kernel", tmp_path, monkeypatch)
    # Past the package step to the next check (an unknown group), so nothing runs.
    assert bench.main(["--cpu", "--suite", "full", "--groups", "nope", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "note: liger_kernel is not installed" in err and "error: --groups: nope not in suite full" in err


def test_the_emulation_predicts_every_recorded_sockets_case():
    """The layouts runs of 2026-11-30, re-predicted from their own link and NVLink measurements: one row per sockets
    case (7), whatever form the recorded recomputation setting takes."""
    from tests.conftest import ROOT

    results = ROOT / "docs" / "bench-results"
    nvlink = json.loads((results / "2026-11-30-h200x2-layouts-nvlink-and-reduce-dtype.json").read_text())
    sockets = json.loads((results / "2026-11-30-h200x2-layouts-sockets.json").read_text())
    rows = report.emulation_rows(nvlink["cases"] + sockets["cases"], sockets["links"], suites.BENCH_MODEL)
    assert [r["name"] for r in rows] == [c["name"] for c in sockets["cases"] if "error" not in c]
    assert all(r["predicted_step_s"] > 0 for r in rows)
