"""training.driver.real_datasets for synthetic data: Ray Data streams nothing (the workers make their own batches,
training.data.synthetic_batches), so nothing is read or tokenized on the driver, whatever the validation options."""

from __future__ import annotations

import pytest

from training import data, driver
from training.config import TrainConfig


@pytest.mark.parametrize("name", ["random", "pattern"])  # training.config.SYNTHETIC_DATA
def test_synthetic_data_has_no_ray_datasets_even_with_a_validation_share(name, monkeypatch):
    monkeypatch.setattr(data, "packed_dataset", lambda *a, **k: pytest.fail("synthetic data was packed as a file"))
    assert driver.real_datasets(TrainConfig(data=name, val_fraction=0.1)) == {}
