"""More of training/tracking.py: a stored tracking run is reopened only where it lives (an MLflow run in its own
experiment, a W&B run in its own project), so a rerun pointed elsewhere starts a run there."""

from __future__ import annotations

from tests.training.test_tracking_cases import server, stored_run, wandb_module  # noqa: F401 - server is a fixture
from training import tracking


def test_a_run_stored_under_another_experiment_of_the_same_server_is_not_reopened(tmp_path, server):  # noqa: F811
    """The run id belongs to its experiment: a rerun under --mlflow-experiment b creates its run in b, rather than
    log into experiment a's run (the user would look for it in b and find nothing)."""
    backend = tracking._Mlflow("http://mlflow:5000", "b", "r")
    assert backend.open(stored_run(tmp_path, experiment="a")) == 0
    assert backend.run_id == "new1" and server.created == ["r"] and server.updated == []


def test_a_run_stored_under_the_same_experiment_and_server_is_reopened(tmp_path, server):  # noqa: F811
    backend = tracking._Mlflow("http://mlflow:5000", "a", "r")
    assert backend.open(stored_run(tmp_path, experiment="a")) == 7
    assert backend.run_id == "run1" and server.created == []


def test_a_wandb_rerun_under_another_project_starts_a_run_of_its_own(tmp_path, monkeypatch):
    """W&B run ids are per entity and project: the id stored for project a's run is not reused in project b."""
    inits = wandb_module(monkeypatch, resumed=False, starting_step=0)
    for project in ("a", "b", "b"):
        tracking._Wandb(project, "team", "r", str(tmp_path)).open(str(tmp_path))
    ids = [init["id"] for init in inits]
    assert ids[0] != ids[1] and ids[1] == ids[2]
    assert [init["project"] for init in inits] == ["a", "b", "b"]
