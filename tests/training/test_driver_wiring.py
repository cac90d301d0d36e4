"""training.driver.real_datasets' wiring: every data-format setting reaches the packing as given, each held at both
of its values (a setting dropped for its default, or passed for its neighbour, gives another row)."""

from __future__ import annotations

import pytest

from training import driver
from training.config import TrainConfig


@pytest.fixture
def formats(monkeypatch) -> list:
    built = []
    monkeypatch.setattr("training.data.packed_dataset", lambda path, **kwargs: built.append(kwargs["fmt"]) or path)
    monkeypatch.setattr("training.data.chat_template_text", lambda source, cache_dir=None: f"<{source}>")
    return built


@pytest.mark.parametrize("given, expected", [
    ({"text_field": "body", "messages_field": "conversation", "assistant_only_loss": True, "default_system_prompt": True},
     ("body", "conversation", (), None, True, True, None)),
    ({"text_field": "content", "messages_field": "turns", "assistant_only_loss": False, "default_system_prompt": False,
      "prompt_field": "question", "response_field": "answer", "chat_template": "t.jinja"},
     ("content", "turns", ("question",), "answer", False, False, "<t.jinja>")),
])
def test_every_data_format_setting_reaches_the_packing_of_both_sides(formats, given, expected):
    driver.real_datasets(TrainConfig(model="o/m", data="train.jsonl", val_fraction=0.1, **given))
    assert len(formats) == 2  # train and validation are packed alike
    for fmt in formats:
        assert (fmt.text_field, fmt.messages_field, fmt.prompt_fields, fmt.response_field, fmt.assistant_only_loss,
                fmt.default_system_prompt, fmt.chat_template) == expected
