"""check_links: both ends of a pair time it, and each figure's slower reading stands (a link is as fast as its
slower direction), all-reduce and all-gather alike."""

from types import SimpleNamespace

import torch

from training import health
from training.health import LinkFigures


def test_each_pairs_slower_reading_of_each_collective_stands(monkeypatch):
    readings = {0: LinkFigures(("a", "b"), 100, 10.0, 4.0), 1: LinkFigures(("a", "b"), 100, 8.0, 6.0)}

    def all_gather_object(out, _mine):
        out[:] = [[readings[0]], [readings[1]]]  # what each end measured

    monkeypatch.setattr(health, "dist", SimpleNamespace(new_group=lambda ranks: None, barrier=lambda: None,
                                                        all_gather_object=all_gather_object))
    monkeypatch.setattr(health, "measure_pair", lambda pair, group, size, device: readings[0])
    links = health.check_links(["a", "b"], 0, 100, torch.device("cpu"))
    assert links == [LinkFigures(("a", "b"), 100, 8.0, 4.0)]


def test_the_run_gates_links_against_the_planners_figure_at_the_models_layer_size(monkeypatch):
    import training.model
    from training.config import TrainConfig

    called = []
    # The built-in config as model_config reads it, without building the model class to check its attention kernels.
    monkeypatch.setattr(training.model, "model_config", lambda cfg: training.model.builtin_config(cfg.model))
    monkeypatch.setattr(health, "run_gate", lambda rank, device, size, predicted, log: called.append((size, predicted)))
    health.gate_for_run(TrainConfig(model="tiny", predicted_link_gbps=3.0), 0, torch.device("cpu"), print)
    # The tiny built-in's layer: 64 hidden, 4 heads of 16, 2 key/value heads, 128 intermediate, in bf16:
    # 2 x (2 x 64 x 64 + 2 x 64 x 32 + 3 x 64 x 128) = 73,728 bytes.
    assert called == [(73_728, 3.0)]
