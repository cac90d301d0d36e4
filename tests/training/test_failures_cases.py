"""training.failures read against Ray 2.58 itself: the variable a user sets to change Ray Train's start timeout is the
one Ray reads, and its default is Ray's."""

from __future__ import annotations

from ray.train.v2._internal import constants as ray_constants

from training.failures import DEFAULT_START_TIMEOUT_S, START_TIMEOUT_ENV, start_timeout_s


def test_the_start_timeout_setting_is_the_variable_ray_train_reads():
    # A misspelt name would still pass the tests that set it through this constant, while Ray ignored it.
    assert START_TIMEOUT_ENV == ray_constants.WORKER_GROUP_START_TIMEOUT_S_ENV_VAR


def test_without_the_setting_the_timeout_is_rays_default(monkeypatch):
    monkeypatch.delenv(START_TIMEOUT_ENV, raising=False)
    assert start_timeout_s() == DEFAULT_START_TIMEOUT_S == ray_constants.DEFAULT_WORKER_GROUP_START_TIMEOUT_S
