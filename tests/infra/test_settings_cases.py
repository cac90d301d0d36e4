"""stacks/settings.py case by case: the placement group each setting gives, the world size and the options the stack
adds to the trainer's, and the setting an error about those options names."""

from __future__ import annotations

import pytest

from stacks.settings import Settings, TrainingSettings, _setting_of_option, trainer_options

BLOCK = "cr-0123456789abcdef0"


# EC2 User Guide: a targeted reservation launches only into the placement group it was created in, so auto makes
# none when a reservation is set; on and off are what they say.
@pytest.mark.parametrize("mode,reservation,placed", [
    ("auto", None, True), ("auto", BLOCK, False), ("on", None, True), ("off", None, False), ("off", BLOCK, False),
])
def test_a_placement_group_is_made_where_it_can_be_launched_into(mode, reservation, placed):
    assert Settings(placement_group=mode, capacity_reservation_id=reservation).use_placement_group is placed


@pytest.mark.parametrize("instance_type,nodes,workers", [("g6.12xlarge", 2, 8), ("p5.48xlarge", 4, 32),
                                                         ("g6.48xlarge", 1, 8)])
def test_one_worker_per_gpu_of_every_node(instance_type, nodes, workers):
    assert Settings(gpu_instance_type=instance_type, gpu_node_count=nodes).training_workers == workers


def test_the_stack_adds_the_world_size_the_instance_type_and_the_node_wait():
    s = Settings(gpu_instance_type="p5.48xlarge", gpu_node_count=4,
                 training=TrainingSettings(pre_running_deadline_seconds=900, active_deadline_seconds=7200))
    options = trainer_options(s)
    # A lost node's replacement is waited for as long as a new cluster's nodes are (the pre-running deadline).
    assert (options["workers"], options["instance_type"], options["node_wait_s"]) == (32, "p5.48xlarge", 900)


@pytest.mark.parametrize("option,setting", [
    ("node_wait_s", "training.pre_running_deadline_seconds"), ("workers", "gpu_node_count"),
    ("instance_type", "gpu_instance_type"), ("max_failures", "training.max_failures"),
    ("batch_tokens", "training.batch_tokens"),
])
def test_an_option_the_stack_adds_is_named_as_the_setting_it_comes_from(option, setting):
    assert _setting_of_option(option) == setting


def test_the_grace_period_is_the_setting_else_the_planners_else_a_spot_notice():
    from stacks.settings import planned_trainer_options, termination_grace

    s = Settings()
    options = planned_trainer_options(s)[0]
    # The default run: 34.7 s to save a drained pod's step, plus the hook's and Ray's drain margins: 70 s.
    assert termination_grace(s, options)[0] == 70
    chosen = Settings(training=TrainingSettings(termination_grace_period_seconds=90))
    grace, estimate = termination_grace(chosen, options)
    assert grace == 90 and round(estimate.needed_s, 1) == 34.7
    # Without a predicted step time the planner knows no save time: a spot interruption's two minutes.
    unpredicted = {k: v for k, v in options.items() if k != "predicted_step_seconds"}
    assert termination_grace(s, unpredicted) == (120, None)
