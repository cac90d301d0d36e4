"""planning/auto.py's rarer paths: the link figure handed to the trainer on one node and on none, and a layout
refusal from --sharding auto reaching the user as the planner's one-line error."""

from types import SimpleNamespace

import pytest

from planning import auto
from planning.auto import LayoutError, PlanError, predicted_link_gbps, resolve_run
from training.command_line import parse_args
from training.config import ConfigError


@pytest.mark.parametrize("inter_bytes, inter_s, intra_bytes, intra_s, gbps", [
    (50e9, 10.0, 300e9, 1.0, 5.0),   # several nodes: the network, however fast the intra-node link
    (0.0, 0.0, 3e9, 0.5, 6.0),       # one node: the intra-node link
    (0.0, 0.0, 0.0, 0.0, None),      # one GPU: no link at all
])
def test_the_predicted_link_is_the_slowest_one_the_step_crosses(inter_bytes, inter_s, intra_bytes, intra_s, gbps):
    found = SimpleNamespace(inter_bytes=inter_bytes, inter_s=inter_s, intra_bytes=intra_bytes, intra_s=intra_s)
    assert predicted_link_gbps(found) == (pytest.approx(gbps) if gbps else None)


def test_a_layout_that_sharding_auto_cannot_fit_is_the_planners_one_line_error(monkeypatch):
    def refuse(*args):
        raise LayoutError("--micro-batch: 64 fits in neither full nor hybrid on 2 x g6.12xlarge")

    monkeypatch.setattr(auto, "resolve_sharding", refuse)
    config = parse_args(["--model", "qwen2.5-1.5b", "--instance-type", "g6.12xlarge", "--workers", "8",
                         "--sharding", "auto", "--micro-batch", "1", "--seq-len", "512", "--batch-tokens", "4096"])
    with pytest.raises(PlanError, match=r"^--micro-batch: 64 fits in neither full nor hybrid on 2 x g6.12xlarge$"):
        resolve_run(config, {})
    assert issubclass(PlanError, ConfigError)  # what planning.train and the synth catch, as one line
