"""More of training.inputs: a Hub model whose config.json transformers cannot use (an architecture this version does
not know: AutoConfig raises ValueError, transformers/models/auto/configuration_auto.py) is refused in one line naming
--model, as an unreachable one (OSError) is, not a traceback after the driver started."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import pytest

from training.config import ConfigError, TrainConfig
from training.inputs import check_hub_positions


@pytest.mark.parametrize("error", [
    ValueError("The checkpoint you are trying to load has model type `newarch` but Transformers does not recognize "
               "this architecture."),
    OSError("org/new-model is not a local folder and is not a valid model identifier"),
])
def test_a_hub_config_transformers_cannot_read_is_refused_naming_model(monkeypatch, error):
    def from_pretrained(name, **kwargs):
        raise error

    monkeypatch.setitem(sys.modules, "transformers", SimpleNamespace(AutoConfig=SimpleNamespace(from_pretrained=from_pretrained)))
    first_line = str(error).splitlines()[0]
    with pytest.raises(ConfigError, match=r"^--model: cannot read org/new-model's config.json \(" + re.escape(first_line)):
        check_hub_positions(TrainConfig(model="org/new-model"))
