"""More of training/preemption.py: Ray Train runs the training function off the main thread, where Python refuses
signal.signal; the handler is then installed through the worker's own actor, whose main thread runs its tasks."""

from __future__ import annotations

import sys
import threading
import types

from training import preemption


def _from_a_training_thread(monkeypatch, actor) -> tuple[bool, list]:
    """install_sigterm_handler() called where Ray Train calls it (not the main thread), with a fake ray whose
    current actor is `actor`; returns its answer and what reached ray.get."""
    got = []
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(
        get_runtime_context=lambda: types.SimpleNamespace(current_actor=actor), get=got.append))
    answer = []
    thread = threading.Thread(target=lambda: answer.append(preemption.install_sigterm_handler()))
    thread.start()
    thread.join(10)
    return answer[0], got


def test_off_the_main_thread_the_handler_is_installed_by_a_task_on_the_workers_actor(monkeypatch):
    """RayTrainWorker.execute(fn) runs fn on the actor's main thread: the function sent is the installer itself
    (the fake runs nothing, so this process's own SIGTERM handler is left alone)."""
    executed = []
    actor = types.SimpleNamespace(execute=types.SimpleNamespace(remote=lambda fn: executed.append(fn) or "ref"))
    assert _from_a_training_thread(monkeypatch, actor) == (True, ["ref"])
    assert executed == [preemption._install]


def test_off_the_main_thread_without_an_actor_to_install_it_the_answer_is_false(monkeypatch):
    """The caller then knows SIGTERM will not ask for a save (the preStop hook still does)."""
    assert _from_a_training_thread(monkeypatch, types.SimpleNamespace())[0] is False
