"""training.precision: fp8 is refused at synth, in one line naming the settings, where the cluster's GPU has no
FP8 tensor cores (the trainer's own refusal, on the RayJob's command line). The stack has no LoRA setting; the
trainer refuses fp8 with --lora-rank itself (tests/test_fp8.py)."""

from __future__ import annotations

import pytest

import stacks.validation  # noqa: F401 - the rule these tests hold (its fp8 refusal) lives there
from stacks.context import settings_from_context
from stacks.settings import SettingsError, trainer_options
from tests.conftest import base_context


@pytest.mark.parametrize("instance_type,gpu", [("g5.48xlarge", "A10G"), ("p4d.24xlarge", "A100")])
def test_fp8_refused_where_the_gpu_has_no_fp8_tensor_cores(instance_type, gpu):
    with pytest.raises(SettingsError, match=rf"^training.precision: fp8 needs FP8 tensor cores, which gpu_instance_type "
                                            rf"{instance_type}'s {gpu} lacks; use training.precision bf16$"):
        settings_from_context(base_context() | {"gpu_instance_type": instance_type, "training.precision": "fp8"})


def test_an_unknown_precision_is_refused():
    with pytest.raises(SettingsError, match=r"^training.precision: 'fp16' must be one of bf16, fp8, auto$"):
        settings_from_context(base_context() | {"training.precision": "fp16"})


def test_fp8_reaches_the_trainer_on_the_default_l4_cluster():
    s = settings_from_context(base_context() | {"training.precision": "fp8"})
    assert trainer_options(s)["precision"] == "fp8"


def test_bf16_by_default():
    assert trainer_options(settings_from_context(base_context()))["precision"] == "bf16"


def test_auto_is_resolved_at_synth_to_bf16_on_the_default_l4_cluster():
    from stacks.settings import planned_trainer_options

    options, line = planned_trainer_options(settings_from_context(base_context() | {"training.precision": "auto"}))
    assert options["precision"] == "bf16"
    assert "precision auto: bf16 (fp8 is unmeasured on the L4" in line
