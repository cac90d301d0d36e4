"""The TensorBoard events a step record becomes: SummaryWriter.add_scalar(tag, scalar_value, global_step) for each
scalar a user looks for, zeros included, written beside the checkpoints (locally first when they are remote)."""

import pytest

from training.records import TENSORBOARD_DIR, _EventFiles


class FakeWriter:
    def __init__(self, logdir):
        self.logdir, self.calls = logdir, []

    def add_scalar(self, tag, scalar_value, global_step):
        self.calls.append((tag, scalar_value, global_step))

    def flush(self):
        pass


def test_each_scalar_goes_out_under_its_tag_at_the_records_step(tmp_path):
    events = _EventFiles(FakeWriter, str(tmp_path))
    events.add({"step": 7, "loss": 2.5, "val_loss": 2.75, "val_ppl": 15.6, "lr": 0.0, "grad_norm": 0.9,
                "tokens_per_s_per_gpu": 1200.0, "mfu": 0.41, "peak_mem_gib": 20.5, "eta_s": 30.0, "time": "t"})
    assert sorted(events.writer.calls) == sorted([
        ("loss/train", 2.5, 7), ("loss/validation", 2.75, 7), ("perplexity/validation", 15.6, 7),
        ("optimizer/lr", 0.0, 7),  # a zero learning rate is a value, not a missing one
        ("optimizer/grad_norm", 0.9, 7), ("throughput/tokens_per_s_per_gpu", 1200.0, 7), ("throughput/mfu", 0.41, 7),
        ("memory/peak_gib", 20.5, 7)])


def test_a_field_the_record_lacks_is_not_written(tmp_path):
    events = _EventFiles(FakeWriter, str(tmp_path))
    events.add({"step": 1, "loss": 3.0, "mfu": None})
    assert events.writer.calls == [("loss/train", 3.0, 1)]


@pytest.mark.parametrize("remote", [False, True])
def test_events_are_written_in_the_run_folder_or_locally_for_a_remote_run(tmp_path, remote):
    run = "s3://bucket/runs/ft" if remote else str(tmp_path / "ft")
    events = _EventFiles(FakeWriter, run)
    assert events.target == f"{run}/{TENSORBOARD_DIR}"
    assert (events.writer.logdir != events.target) is remote and "://" not in events.writer.logdir


@pytest.mark.parametrize("line, expected", [
    ('eks-fsdp-efa.step {"step":3,"loss":2.0}', {"step": 3, "loss": 2.0}),  # the prefix at the line's start
    ('(RayTrainWorker pid=9) eks-fsdp-efa.step {"step":4,"loss":1.5}', {"step": 4, "loss": 1.5}),
    ('eks-fsdp-efa.step {"loss":2.0}', None),  # no step: not a step record
    ('eks-fsdp-efa.step [1, 2]', None),
    ('eks-fsdp-efa.step {"step":5,"lo', None),  # cut short
])
def test_a_log_line_carries_a_step_record_only_with_its_step(line, expected):
    from training.records import parse_record

    assert parse_record(line) == expected
