"""benchmarks/worker.py on the CPU: the layout a trainer case builds and what its levers are in force for."""

from __future__ import annotations

import contextlib

import pytest
import torch

from benchmarks import levers, worker
from benchmarks.suites import Case


class Built(Exception):
    """Raised by the stand-ins once they have recorded what they were given: nothing is built."""


@pytest.mark.parametrize("world, gpus_per_node, sharding, mesh", [
    (2, 1, "hybrid", (2, 1)),  # two emulated one-GPU nodes: replicate across both, no sharding within one
    (8, 4, "hybrid", (2, 4)),  # two emulated nodes of 4 (the users' 2 x g6.12xlarge)
    (4, None, "hybrid", (1, 4)),  # no emulated nodes: the group's GPUs are one node
    (8, 4, "auto", (2, 4)),  # auto is full sharding, over the same ranks
])
def test_a_trainer_case_builds_its_mesh_as_nodes_by_gpus_per_node(monkeypatch, world, gpus_per_node, sharding, mesh):
    """training.model.device_mesh(device, sharding, nodes, gpus_per_node): row i of a hybrid mesh is node i's GPUs
    (replicate across nodes, shard within one). Swapped, a hybrid case would shard across the nodes instead."""
    import training.model

    given = []

    def device_mesh(device, kind, nodes, per_node):
        given.append((kind, (nodes, per_node)))
        raise Built

    monkeypatch.setattr(training.model, "device_mesh", device_mesh)
    cfg = Case("c", overrides={"sharding": sharding}).train_config("tiny")
    with pytest.raises(Built):
        worker._trainer_step(cfg, torch.device("cpu"), 0, world, None, gpus_per_node)
    assert given == [("full" if sharding == "auto" else "hybrid", mesh)]


@contextlib.contextmanager
def _probe(events):
    events.append("enter")
    try:
        yield
    finally:
        events.append("exit")


def test_a_cases_levers_are_in_force_while_its_model_is_built_and_left_after(monkeypatch):
    """Levers such as fp8-rowwise (the float8 config), fp8-kv (the converted layers) and max-autotune (the compile)
    act when the model is built: entered only around the steps, they would time the default."""
    events = []
    monkeypatch.setitem(levers.LEVERS, "probe", lambda: _probe(events))

    def build(*args, **kwargs):
        events.append("build")
        raise Built("stop here")

    monkeypatch.setattr(worker, "_trainer_step", build)
    case = Case("c", levers=("probe",))
    result = worker.run_case(case, case.train_config("tiny"), torch.device("cpu"), 0, 1, None, 1, 1)
    assert events == ["enter", "build", "exit"]
    assert result["error"] == "Built" and result["levers"] == ["probe"]


@pytest.mark.parametrize("recipe, error", [("example", "FSDP1 needs a GPU"), ("liger", "Liger's kernels need a GPU"),
                                           ("fp8-peer", "Liger's kernels need a GPU")])
def test_a_gpu_only_recipe_on_the_cpu_is_reported_by_what_needs_the_gpu_without_building(monkeypatch, recipe, error):
    events = []
    monkeypatch.setitem(levers.LEVERS, "probe", lambda: _probe(events))
    case = Case("c", recipe=recipe, levers=("probe",))
    assert worker.run_case(case, case.train_config("tiny"), torch.device("cpu"), 0, 1, None, 1, 1)["error"] == error
    assert events == []


@pytest.fixture
def wired(monkeypatch):
    """_trainer_step with the trainer's pieces recorded instead of run: what build_model and train_step are given
    (and the reduce dtype of the mixed precision policy build_model would make)."""
    import types

    import training.model
    import training.step

    seen = {}

    def build_model(cfg, device, rank, world, full_state, mesh=None):
        policy = training.model.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        seen["reduce_dtype"] = policy.reduce_dtype
        return types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=64))

    def train_step(model, optimizer, batches, grad_accum, grad_clip, lr, device, **kwargs):
        seen["step"] = {"grad_accum": grad_accum, "grad_clip": grad_clip, "lr": lr, **kwargs}
        return types.SimpleNamespace(loss=1.0)

    monkeypatch.setattr(training.model, "device_mesh", lambda *args: None)
    monkeypatch.setattr(training.model, "build_model", build_model)
    monkeypatch.setattr(training.step, "make_optimizer", lambda *args: None)
    monkeypatch.setattr(training.step, "train_step", train_step)
    return seen


@pytest.mark.parametrize("reshard_after_forward, keep_gathered", [(True, False), (False, True)])
def test_the_trainer_step_keeps_the_weights_gathered_exactly_when_they_are_not_resharded(wired, reshard_after_forward,
                                                                                         keep_gathered):
    cfg = Case("c", profile="l4", overrides={"reshard_after_forward": reshard_after_forward}).train_config("tiny")
    _, _, step = worker._trainer_step(cfg, torch.device("cpu"), 0, 1, None)
    step(0)
    assert wired["step"]["keep_weights_gathered"] is keep_gathered


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_only_an_fp8_step_precomputes_the_float8_scales_after_the_update(wired, precision):
    from training.fp8 import after_optimizer_step

    cfg = Case("c", profile="l4", overrides={"precision": precision}).train_config("tiny")
    _, _, step = worker._trainer_step(cfg, torch.device("cpu"), 0, 1, None)
    step(0)
    assert wired["step"]["after_update"] is (after_optimizer_step if precision == "fp8" else None)


def test_the_trainer_step_follows_the_trainers_schedule_accumulation_and_clipping(wired):
    """lr 1e-3, 4 warm-up steps, 20 steps: step 0 is 1e-3 x 1/4 (linear warm-up), step 19 the last, 1e-3 x 0.1
    (min_lr_ratio), training.schedule.lr_at's rule; the case's grad_accum and grad_clip."""
    cfg = Case("c", profile="l4", overrides={"lr": 1e-3, "warmup_steps": 4, "steps": 20, "grad_accum": 3,
                                             "grad_clip": 0.5}).train_config("tiny")
    _, _, step = worker._trainer_step(cfg, torch.device("cpu"), 0, 1, None)
    step(0)
    assert (wired["step"]["lr"], wired["step"]["grad_accum"], wired["step"]["grad_clip"]) == pytest.approx((2.5e-4, 3, 0.5))
    step(19)
    assert wired["step"]["lr"] == pytest.approx(1e-4)


@pytest.mark.parametrize("legacy, reduce_dtype", [(False, torch.float32), (True, torch.bfloat16)])
def test_legacy_accumulation_reduces_in_the_compute_dtype_while_the_model_is_built_and_only_then(wired, legacy,
                                                                                                 reduce_dtype):
    import training.model

    own = training.model.MixedPrecisionPolicy
    cfg = Case("c", profile="l4").train_config("tiny")
    worker._trainer_step(cfg, torch.device("cpu"), 0, 1, None, legacy_bf16_accumulation=legacy)
    assert wired["reduce_dtype"] == reduce_dtype
    assert training.model.MixedPrecisionPolicy is own


def test_a_cases_validation_loss_is_taken_on_the_validation_seeds_stream_of_this_rank(monkeypatch):
    """The held-out sequences train_func validates on (seed + training.data.VALIDATION_SEED_OFFSET), this rank's
    share, as many micro-batches as the case asks for: never the training stream's batches."""
    import itertools
    import types

    import training.step
    from training.data import VALIDATION_SEED_OFFSET, synthetic_batches

    seen = []
    monkeypatch.setattr(training.step, "evaluate", lambda model, held, device: seen.append(held) or (2.5, None))
    cfg = Case("c", profile="l4", overrides={"data": "pattern", "seq_len": 16, "micro_batch": 2}).train_config("tiny")
    model = types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=64))
    assert worker._validation_loss(model, cfg, torch.device("cpu"), 1, 2, 3) == 2.5
    want = list(itertools.islice(synthetic_batches("pattern", cfg.seed + VALIDATION_SEED_OFFSET, 64, 16, 2, 1, 2), 3))
    [held] = seen
    assert len(held) == 3 and all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(held, want))
    training_stream = next(synthetic_batches("pattern", cfg.seed, 64, 16, 2, 1, 2))
    assert not torch.equal(held[0]["input_ids"], training_stream["input_ids"])


@pytest.fixture
def timed(monkeypatch):
    """run_case with a stand-in model and step: records how many steps it times and what it validates on."""
    seen = {}

    def time_steps(step, warmup, steps, device):
        seen["steps"] = steps
        return {"step_time_s": 0.5, "losses": [1.0]}

    monkeypatch.setattr(worker, "_trainer_step", lambda *args, **kwargs: ("model", None, lambda i: 1.0))
    monkeypatch.setattr(worker, "time_steps", time_steps)
    monkeypatch.setattr(worker, "_validation_loss", lambda model, cfg, device, rank, world, batches:
                        seen.setdefault("validated", (model, batches)) and 2.5)
    return seen


@pytest.mark.parametrize("data, timed_steps", [("pattern", 60), ("random", 3)])
def test_a_loss_curve_case_runs_its_own_steps_and_a_speed_case_the_runs(timed, data, timed_steps):
    """Pattern data (the loss-curve cases of the layouts and accumulation suites) runs the case's 60 steps; a speed
    case on random tokens the run's --steps (3 here)."""
    case = Case("c", profile="l4", overrides={"data": data, "steps": 60, "warmup_steps": 5})
    result = worker.run_case(case, case.train_config("tiny"), torch.device("cpu"), 0, 1, None, 1, 3)
    assert "error" not in result and timed["steps"] == timed_steps


@pytest.mark.parametrize("batches", [0, 8])
def test_a_case_is_validated_only_when_it_asks_for_held_out_batches(timed, batches):
    case = Case("c", profile="l4", evaluate_batches=batches)
    result = worker.run_case(case, case.train_config("tiny"), torch.device("cpu"), 0, 1, None, 1, 3)
    assert result.get("val_loss") == (2.5 if batches else None)
    assert timed.get("validated") == (("model", 8) if batches else None)
