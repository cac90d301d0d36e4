"""training.train.run_worker's wiring, run in this process without Ray: one gloo worker (a HashStore group), the
tiny model on CPU, synthetic data, a few steps. What each checkpoint records (step, data position), the save
cadence and its waits, the summary, the stop votes, a NaN step, the record and evaluation cadence and the lr each
step gets, against literal figures worked out here.

One run (the "interrupted" run) fails at step 3 on a NaN loss after its checkpoint of step 2; a second attempt of the
same run resumes there and ends at step 6. A third run is asked to stop by its pod at step 1 and by SIGTERM at
step 3."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil
import signal
import time
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from training import checkpoint as ckpt
from training import faults, preemption, step as step_module, train, watchdog
from training.config import TrainConfig
from training.config_rules import validate
from training.data import synthetic_block
from training.model import model_config
from training.records import METRICS_FILE, RecordWriter, read_metrics
from training.storage import SETTINGS
from training.worker import DATA_COUNTS_FILE

SEQ_LEN, MICRO_BATCH, GRAD_ACCUM = 16, 2, 2
ROWS_PER_STEP = 1 * MICRO_BATCH * GRAD_ACCUM  # one worker: 4 sequences per optimizer step
# lr_at's schedule worked out by hand for --lr 1e-2, --warmup-steps 2, --steps 6, --min-lr-ratio 0.1: warmup
# 1e-2 x 1/2, 1e-2 x 2/2; then cosine from the peak (step index 1) to 1e-3 at index 5 over 4 steps:
# 1e-3 + 9e-3 x (1 + cos(pi x k/4)) / 2 for k = 1, 2, 3, 4.
LR_PER_STEP = [5e-3, 1e-2, 8.6820e-3, 5.5e-3, 2.3180e-3, 1e-3]
# The resumed attempt's evaluations (after steps 3 and 6) each take this long at least: a step's time must not hold it.
EVALUATION_SECONDS = 0.6


def _config(tmp, name: str, **changes) -> TrainConfig:
    return validate(TrainConfig(**({
        "model": "tiny", "data": "random", "seq_len": SEQ_LEN, "micro_batch": MICRO_BATCH, "grad_accum": GRAD_ACCUM,
        "workers": 1, "steps": 6, "lr": 1e-2, "warmup_steps": 2, "min_lr_ratio": 0.1, "grad_clip": 0.5, "seed": 3,
        "storage_path": str(tmp), "run_name": name} | changes)))


class _Spy:
    """What run_worker hands train_step, evaluate and Checkpoints.save, one attempt at a time."""

    def __init__(self, monkeypatch) -> None:
        self.attempts: list[dict] = []
        self.sigterm_before_step: int | None = None
        self.metrics_file: Path | None = None
        self.evaluation_seconds = 0.0  # each evaluation takes at least this long
        real_step, real_evaluate, real_save = step_module.train_step, step_module.evaluate, ckpt.Checkpoints.save

        def train_step(model, optimizer, batches, grad_accum, grad_clip, lr, device, **options):
            steps = self.attempts[-1]["steps"]
            steps.append({"lr": lr, "grad_accum": grad_accum, "grad_clip": grad_clip,
                          "keep_weights_gathered": options.get("keep_weights_gathered"),
                          "loop_running": preemption._training.is_set()})
            if self.sigterm_before_step == len(self.attempts[-1]["steps"]):
                preemption._sigterm.set()  # what the handler does on SIGTERM, seen by this step's vote
            if self.metrics_file is not None:  # the records in storage as the step starts
                steps[-1]["records_before"] = ([r["step"] for r in read_metrics(self.metrics_file.read_text())]
                                               if self.metrics_file.exists() else [])
            started = time.perf_counter()
            try:
                return real_step(model, optimizer, batches, grad_accum, grad_clip, lr, device, **options)
            finally:
                steps[-1]["seconds"] = time.perf_counter() - started

        def evaluate(*args, **kwargs):
            self.attempts[-1]["evaluated_after"].append(len(self.attempts[-1]["steps"]))
            time.sleep(self.evaluation_seconds)
            return real_evaluate(*args, **kwargs)

        def save(checkpoints, model, optimizer, at, data_position, files=None, wait=False):
            self.attempts[-1]["saves"].append((at, data_position, wait))
            self.attempts[-1]["background"] = checkpoints.saver is not None
            return real_save(checkpoints, model, optimizer, at, data_position, files=files, wait=wait)

        real_for_run = watchdog.for_run

        def for_run(run_uri, attempt, rank, predicted_step_s, bound_s=None, **kwargs):
            self.attempts[-1]["watchdog"] = (predicted_step_s, bound_s)
            return real_for_run(run_uri, attempt, rank, predicted_step_s, bound_s, **kwargs)

        monkeypatch.setattr(watchdog, "for_run", for_run)
        monkeypatch.setattr(step_module, "train_step", train_step)
        monkeypatch.setattr(step_module, "evaluate", evaluate)
        monkeypatch.setattr(ckpt.Checkpoints, "save", save)

    def run(self, cfg: TrainConfig) -> None:
        self.attempts.append({"steps": [], "evaluated_after": [], "saves": []})
        previous = signal.getsignal(signal.SIGTERM)
        attempt = self.attempts[-1]
        try:
            attempt["summary"], attempt["error"] = train.run_worker(cfg, 0, 1, torch.device("cpu")), None
        except Exception as error:  # noqa: BLE001 - the tests check what ended the attempt
            attempt["summary"], attempt["error"] = None, error
        finally:  # what run_worker installs in the process
            signal.signal(signal.SIGTERM, previous)
            preemption._sigterm.clear()
            self.sigterm_before_step = None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train-audit")
    with pytest.MonkeyPatch.context() as monkeypatch:
        import ray

        # sharding_mesh asks Ray which node each rank is on
        monkeypatch.setattr(ray, "get_runtime_context", lambda: types.SimpleNamespace(get_node_id=lambda: "node-a"))
        monkeypatch.setenv(preemption.STOP_DIR_ENV, str(tmp / "stop"))
        monkeypatch.setenv(faults.ROW_LOG_ENV, str(tmp / "rows"))  # each rank's rows, step by step
        started_here = not dist.is_initialized()
        if started_here:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        # The metrics writer's own timer (a write, then 10 s without) must not decide what is in storage when:
        # here it waits longer than the runs, so only the first record, each checkpoint's flush and the end write.
        monkeypatch.setattr("training.records.RecordWriter", functools.partial(RecordWriter, interval_s=3600.0))
        spy = _Spy(monkeypatch)
        try:
            # The first attempt logs every step (step 2's record is in storage by step 3 only through the
            # checkpoint's flush), the second every 2.
            interrupted = _config(tmp, "resumed", checkpoint_every=2, log_every=1, eval_every=3, val_fraction=0.1,
                                  eval_batches=1, inject_nan_at_step=3, predicted_step_seconds=30.0,
                                  watchdog_step_seconds=900.0)
            spy.metrics_file = tmp / "resumed" / METRICS_FILE
            spy.run(interrupted)
            spy.evaluation_seconds = EVALUATION_SECONDS
            spy.run(dataclasses.replace(interrupted, inject_nan_at_step=None, log_every=2))
            spy.evaluation_seconds = 0.0
            # The pod's preStop hook asks before step 1; SIGTERM reaches the worker before step 3.
            stop_folder = tmp / "stop"
            stop_folder.mkdir()
            (stop_folder / preemption.REQUEST).write_text("nonce-1")
            spy.metrics_file = None
            spy.sigterm_before_step = 3
            spy.run(_config(tmp, "stopped", steps=5, checkpoint_every=0))
            # The finished run started once more, asked for an --export-hf: nothing to train, the export still runs.
            logged, exported = [], []
            monkeypatch.setattr(train, "log", lambda rank, message: logged.append(message))
            monkeypatch.setattr(train, "export_model", lambda cfg, model, rank, folder=None: exported.append(
                (cfg.run_name, model, rank, folder)))
            shutil.copytree(tmp / "resumed", tmp / "finished")  # a copy: the resumed run's records stay its own
            spy.run(dataclasses.replace(interrupted, run_name="finished", inject_nan_at_step=None, log_every=2,
                                        export_hf=True))
            spy.attempts[-1].update(logged=logged, exported=exported)
            yield types.SimpleNamespace(tmp=tmp, attempts=spy.attempts, answer=stop_folder / preemption.ANSWER)
        finally:
            if started_here:
                dist.destroy_process_group()


def _run_uri(runs, name: str) -> str:
    return str(runs.tmp / name)


# ---------------------------------------------------------------- a fresh attempt, then a resumed one


def test_a_fresh_attempt_records_each_checkpoint_at_its_step_times_the_global_batch(runs):
    # checkpoint_every 2: step 2 is saved (8 rows of 4-row global batches), in the background, before the NaN at 3.
    assert runs.attempts[0]["saves"] == [(2, 2 * ROWS_PER_STEP, False)]


def test_a_resumed_attempt_records_the_rows_since_the_run_began_not_since_the_attempt(runs):
    # Resumed at step 2 (8 rows): step 4 is 16 rows in, step 6 (the last, waited for) 24.
    assert runs.attempts[1]["saves"] == [(4, 4 * ROWS_PER_STEP, False), (6, 6 * ROWS_PER_STEP, True)]


def test_the_checkpoint_in_storage_holds_the_last_steps_data_position(runs):
    newest, _ = ckpt.resume_choice(_run_uri(runs, "resumed"))
    assert ckpt.read_train_state(newest) == (6, 6 * ROWS_PER_STEP)


def test_the_resumed_attempt_trains_the_rows_after_the_checkpoint_none_twice(runs):
    # Steps 1-2 of the first attempt, then 3-6 of the second: global rows 0-23 of the synthetic stream, in order (the
    # NaN step 3 of the first attempt wrote no step record). Row i is synthetic_block(..., i, ...) without its last token.
    records = [json.loads(line) for line in (runs.tmp / "rows" / "resumed" / "rank0.jsonl").read_text().splitlines()]
    trained = [row for record in records if "step" in record for row in record["rows"]]
    cfg = _config(runs.tmp, "resumed")
    vocab = model_config(cfg).vocab_size
    expected = [faults.row_id(synthetic_block("random", cfg.seed, i, vocab, SEQ_LEN + 1)[:-1]) for i in range(24)]
    assert [r["step"] for r in records if "step" in r] == [1, 2, 3, 4, 5, 6]
    assert trained == expected


def test_the_row_log_names_the_step_each_attempt_started_after(runs):
    records = [json.loads(line) for line in (runs.tmp / "rows" / "resumed" / "rank0.jsonl").read_text().splitlines()]
    assert [r["resumed_from"] for r in records if "resumed_from" in r] == [0, 2]


def test_a_checkpoint_holds_the_data_counted_up_to_its_step_and_the_runs_settings(runs):
    newest, _ = ckpt.resume_choice(_run_uri(runs, "resumed"))
    counts = json.loads((Path(newest) / DATA_COUNTS_FILE).read_text())
    assert counts["tokens"] == 6 * ROWS_PER_STEP * SEQ_LEN
    settings = json.loads((Path(newest) / SETTINGS).read_text())
    assert (settings["run_name"], settings["steps"], settings["micro_batch"]) == ("resumed", 6, MICRO_BATCH)


def test_the_summary_counts_the_whole_run_and_names_where_it_resumed(runs):
    summary = runs.attempts[1]["summary"]
    assert (summary["step"], summary["resumed_from_step"], summary["world_size"]) == (6, 2, 1)
    # 6 steps x 4 sequences x 16 tokens, the 2 steps before the resume included (from the checkpoint's counts)
    assert summary["data_counts"]["tokens"] == 6 * ROWS_PER_STEP * SEQ_LEN
    assert len(summary["checkpoint_stalls_s"]) == 2  # this attempt's two saves, steps 4 and 6


def test_the_summary_names_the_layout_and_transport_the_run_had(runs):
    summary = runs.attempts[1]["summary"]
    # --sharding auto on one machine is full sharding; CPU workers talk over gloo
    assert (summary["sharding"], summary["transport"]) == ("full", "gloo (CPU): no NCCL")
    assert summary["health"]["links"] == []  # one node: no link to measure


def test_a_nan_step_stops_before_its_update_leaving_the_last_good_checkpoint_newest(runs):
    first = runs.attempts[0]
    assert isinstance(first["error"], RuntimeError)
    assert str(first["error"]).startswith("step 3: ")
    assert "the newest committed checkpoint is step 2" in str(first["error"])
    assert "(lower --lr or check the data)" in str(first["error"])
    # The second attempt resumed from step 2: the NaN step wrote nothing.
    assert runs.attempts[1]["summary"]["resumed_from_step"] == 2


def test_each_step_gets_the_schedules_lr_across_the_resume(runs):
    lrs = [s["lr"] for s in runs.attempts[0]["steps"] + runs.attempts[1]["steps"]]
    # steps 1-3, then 3-6 again after the resume at 2
    assert lrs == pytest.approx(LR_PER_STEP[:3] + LR_PER_STEP[2:], rel=1e-4)


def test_each_step_gets_the_runs_accumulation_clip_and_resharding(runs):
    assert {(s["grad_accum"], s["grad_clip"], s["keep_weights_gathered"]) for s in runs.attempts[1]["steps"]} == {
        (GRAD_ACCUM, 0.5, False)}  # --reshard-after-forward (default): the weights are not kept gathered


def test_records_go_out_every_log_every_steps_at_the_last_and_with_each_evaluation(runs):
    # eval_every 3, 6 steps: records at 1 and 2 (first attempt, log_every 1), then, with log_every 2, 3 (evaluated),
    # 4, 6 (evaluated, last).
    records = read_metrics((runs.tmp / "resumed" / METRICS_FILE).read_text())
    assert [r["step"] for r in records] == [1, 2, 3, 4, 6]
    assert [r["step"] for r in records if r.get("val_loss") is not None] == [3, 6]


def test_evaluations_run_every_eval_every_steps_and_at_the_last(runs):
    # Resumed at step 2: steps 3 and 6 are the attempt's 1st and 4th.
    assert runs.attempts[1]["evaluated_after"] == [1, 4]


# ---------------------------------------------------------------- stop votes


def test_a_stop_asked_by_the_pod_saves_that_step_waited_for_and_the_attempt_trains_on(runs):
    # Asked before step 1 (no checkpoint_every): step 1 is saved and committed, then steps 2 and 3 train.
    saves = runs.attempts[2]["saves"]
    assert saves[0] == (1, 1 * ROWS_PER_STEP, True)
    assert len(runs.attempts[2]["steps"]) == 3


def test_the_pods_hook_is_answered_with_the_committed_step(runs):
    assert runs.answer.read_text() == "nonce-1 step 1"


def test_sigterm_saves_that_step_waited_for_and_ends_the_attempt(runs):
    stopped = runs.attempts[2]
    assert stopped["saves"][1:] == [(3, 3 * ROWS_PER_STEP, True)]
    assert isinstance(stopped["error"], preemption.StopRequested)
    newest, _ = ckpt.resume_choice(_run_uri(runs, "stopped"))
    assert ckpt.read_train_state(newest) == (3, 3 * ROWS_PER_STEP)


def test_the_records_carry_each_steps_lr_and_the_evaluations_perplexity(runs):
    records = read_metrics((runs.tmp / "resumed" / METRICS_FILE).read_text())
    assert [r["lr"] for r in records] == pytest.approx([LR_PER_STEP[i - 1] for i in (1, 2, 3, 4, 6)], rel=1e-4)
    evaluated = [r for r in records if r.get("val_loss") is not None]
    assert [r["val_ppl"] for r in evaluated] == pytest.approx([math.exp(r["val_loss"]) for r in evaluated])


def test_records_of_synthetic_data_carry_no_data_counts(runs):
    # Synthetic rows have no padding, truncation or unlearned tokens to count (step_record's counted=False).
    records = read_metrics((runs.tmp / "resumed" / METRICS_FILE).read_text())
    assert {r.get("padding") for r in records} == {None}


def test_saves_are_asynchronous_by_default(runs):
    assert runs.attempts[1]["background"] is True


def test_nothing_is_exported_unless_asked(runs):
    # Neither --export-checkpoints (an hf/ folder in each checkpoint) nor --export-hf (<run>/hf-export).
    newest, _ = ckpt.resume_choice(_run_uri(runs, "resumed"))
    assert not (Path(newest) / "hf").exists()
    assert not (runs.tmp / "resumed" / "hf-export").exists()


def test_the_watchdog_gets_the_planned_step_time_and_the_set_bound(runs):
    assert runs.attempts[1]["watchdog"] == (30.0, 900.0)


def test_sigterm_asks_for_a_save_only_while_the_loop_runs(runs):
    assert {s["loop_running"] for s in runs.attempts[1]["steps"]} == {True}
    assert not preemption._training.is_set()  # after the attempt: SIGTERM does what it did before


def test_a_checkpoint_flushes_the_records_up_to_its_step(runs):
    # A worker killed after the checkpoint of step 2 (kill -9: no finally) leaves step 2's record in storage.
    assert runs.attempts[0]["steps"][2]["records_before"] == [1, 2]


def test_the_first_record_after_a_resume_times_the_steps_of_this_attempt_only(runs):
    # Resumed at step 2, step 3's record is its own step time, not the time since the attempt began divided by the
    # 3 steps since step 0 (which would triple tokens/s and MFU).
    records = {r["step"]: r for r in read_metrics((runs.tmp / "resumed" / METRICS_FILE).read_text())}
    assert records[3]["step_time_s"] >= runs.attempts[1]["steps"][0]["seconds"]


def test_a_finished_run_started_again_trains_nothing_and_says_so(runs):
    again = runs.attempts[3]
    assert again["error"] is None and again["steps"] == [] and again["saves"] == []
    assert "the run is complete: its checkpoint is at step 6 of 6; nothing to train" in again["logged"]


def test_export_hf_exports_the_trained_model_once_at_the_end(runs):
    from training.model import CausalLMWithLoss

    [(run_name, model, rank, folder)] = runs.attempts[3]["exported"]
    assert (run_name, isinstance(model, CausalLMWithLoss), rank, folder) == ("finished", True, 0, None)


def test_an_evaluations_time_stays_out_of_the_next_steps_time(runs):
    # The resumed attempt evaluates after step 3 (0.6 s at least) and records steps 3, 4 and 6. Step 4's record must
    # time step 4 alone, as the step itself measured it (the spy's clock around train_step), not step 3's evaluation:
    # counted in, tokens/s, TFLOP/s and MFU would drop after every --eval-every pass.
    step_4 = next(r for r in read_metrics((runs.tmp / "resumed" / METRICS_FILE).read_text()) if r["step"] == 4)
    own_seconds = runs.attempts[1]["steps"][1]["seconds"]  # the attempt's steps are 3, 4, 5, 6
    assert runs.attempts[1]["evaluated_after"] == [1, 4]
    assert step_4["step_time_s"] < own_seconds + EVALUATION_SECONDS / 2
