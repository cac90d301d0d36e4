"""stacks/settings.py: what a synth writes back to the project's context file."""

from __future__ import annotations


def test_only_the_model_configs_this_synth_looked_up_are_written_back(monkeypatch):
    # A model the planner sized from its config.json is cached like a CDK lookup: the new entries are written,
    # the ones already cached are not written again.
    import planning.auto
    import planning.model_config as mc
    from stacks.settings import Settings, _plan

    monkeypatch.setattr(mc, "project_context", lambda: {"org/cached": {"hidden_size": 1}})

    def resolve(options, configs):
        configs["org/new"] = {"hidden_size": 2}  # what the planner looked up on the Hub
        return options, None

    monkeypatch.setattr(planning.auto, "resolve_options", resolve)
    saved = []
    monkeypatch.setattr(mc, "save", lambda entries, path: saved.append((entries, path)))
    _plan(Settings())
    assert saved == [({"org/new": {"hidden_size": 2}}, mc.PROJECT_CONTEXT_FILE)]
