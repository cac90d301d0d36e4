"""Chat records reach the chat template as they are (tool calls, text parts, tools), a chat that opens
with the assistant learns only its reply, and records a template cannot mean are refused by name.

The template below is written for these tests in the layout of Qwen2.5's: a default system turn when
the chat has none, tool calls rendered as JSON inside <tool_call> tags after the assistant header.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import DATA
from training.data import DataError, DataFormat, tokenize_records
from benchmarks.tiny_model import save_tiny_model

QWEN_LIKE_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}{{ '<|im_start|>assistant' }}"
    "{% if m['content'] %}{{ '\\n' + m['content'] }}{% endif %}"
    "{% for call in m['tool_calls'] or [] %}{{ '\\n<tool_call>\\n{\"name\": \"' + call['function']['name'] + '\", \"arguments\": ' }}"
    "{{ call['function']['arguments'] | tojson }}{{ '}\\n</tool_call>' }}{% endfor %}{{ '<|im_end|>\\n' }}"
    "{% elif m['content'] is string %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\\n' }}{% for part in m['content'] %}{{ part['text'] }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", DATA / "chat.jsonl")
    loaded = AutoTokenizer.from_pretrained(folder)
    loaded.chat_template = QWEN_LIKE_TEMPLATE
    return loaded


def learned_text(tokenizer, record: dict, fmt: DataFormat = DataFormat()) -> str:
    [(ids, learned, _)] = tokenize_records([record], tokenizer, fmt)
    return tokenizer.decode([t for t, keep in zip(ids, learned) if keep])


CALL = {"type": "function", "function": {"name": "get_quota", "arguments": {"code": "L-DB2E81BA"}}}


def test_a_tool_call_turn_is_learned_as_the_call_not_as_none(tokenizer):
    record = {"messages": [{"role": "user", "content": "G quota?"},
                           {"role": "assistant", "content": None, "tool_calls": [CALL]},
                           {"role": "tool", "content": "96"},
                           {"role": "assistant", "content": "96 vCPUs."}]}
    learned = learned_text(tokenizer, record)
    assert learned == ('<tool_call>\n{"name": "get_quota", "arguments": {"code": "L-DB2E81BA"}}\n</tool_call>'
                       "<|im_end|>\n96 vCPUs.<|im_end|>\n<|endoftext|>")
    assert "None" not in learned


def test_arrow_fills_from_other_records_are_not_rendered(tokenizer):
    """Ray Data reads a JSONL whose records differ as one struct type: keys a record lacks come as null,
    arrays as numpy arrays."""
    call = {"type": "function", "function": {"name": "get_quota", "arguments": {"code": "L-DB2E81BA", "region": None}}}
    record = {"messages": np.array([{"role": "user", "content": "G quota?", "tool_calls": None},
                                    {"role": "assistant", "content": None, "tool_calls": np.array([call], dtype=object)}],
                                   dtype=object)}
    assert learned_text(tokenizer, record).startswith('<tool_call>\n{"name": "get_quota", "arguments": {"code": "L-DB2E81BA"}}')


def test_text_parts_reach_the_template_as_parts(tokenizer):
    record = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Why "}, {"type": "text", "text": "EFA?"}]},
                           {"role": "assistant", "content": "Bandwidth."}]}
    [(ids, _, _)] = tokenize_records([record], tokenizer, DataFormat())
    assert "<|im_start|>user\nWhy EFA?<|im_end|>" in tokenizer.decode(ids)
    assert "'type'" not in tokenizer.decode(ids)


@pytest.mark.parametrize("content", [42, {"text": "a dict"}, [{"text": "a part without a type"}], None])
def test_content_the_template_cannot_mean_is_refused_naming_the_record(tokenizer, content):
    record = {"id": "rec-17", "messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]}
    with pytest.raises(DataError, match=r"content must be a string.*record \{\"id\": \"rec-17\""):
        tokenize_records([record], tokenizer, DataFormat())


@pytest.mark.parametrize("response", [None, float("nan"), "", 3])
def test_a_missing_response_is_refused_not_learned_as_nan(tokenizer, response):
    fmt = DataFormat(prompt_fields=("instruction",), response_field="output")
    with pytest.raises(DataError, match=r"--response-field: 'output' must hold a non-empty string; record"):
        tokenize_records([{"instruction": "Say hi.", "output": response}], tokenizer, fmt)


def test_a_chat_opening_with_the_assistant_learns_only_its_reply(tokenizer):
    record = {"messages": [{"role": "assistant", "content": "Hello, I train models."},
                           {"role": "user", "content": "On what?"}, {"role": "assistant", "content": "On L4s."}]}
    assert learned_text(tokenizer, record) == "Hello, I train models.<|im_end|>\nOn L4s.<|im_end|>\n<|endoftext|>"


def test_offered_tools_reach_the_template(tokenizer):
    tokenizer_with_tools = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    tokenizer_with_tools.chat_template = "{{ tools | tojson }}" + QWEN_LIKE_TEMPLATE
    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi."}],
              "tools": [{"type": "function", "function": {"name": "get_quota"}}]}
    [(ids, _, _)] = tokenize_records([record], tokenizer_with_tools, DataFormat())
    assert tokenizer.decode(ids).startswith('[{"type": "function", "function": {"name": "get_quota"}}]')


def test_no_default_system_prompt_drops_the_templates_own_text(tokenizer):
    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    [(ids, _, _)] = tokenize_records([record], tokenizer, DataFormat(default_system_prompt=False))
    assert tokenizer.decode(ids).startswith("<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi")
    [(ids, _, _)] = tokenize_records([record], tokenizer, DataFormat())
    assert "You are a helpful assistant." in tokenizer.decode(ids)


def test_a_template_without_a_default_is_left_as_it_is(tokenizer):
    from benchmarks.tiny_model import CHAT_TEMPLATE

    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    fmt = DataFormat(chat_template=CHAT_TEMPLATE, default_system_prompt=False)
    [(ids, learned, _)] = tokenize_records([record], tokenizer, fmt)
    assert tokenizer.decode(ids).startswith("<|im_start|>user\nHi")


def test_a_chat_template_override_renders_and_masks_with_the_override(tokenizer):
    override = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}[assistant] {% endif %}")
    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    [(ids, learned, _)] = tokenize_records([record], tokenizer, DataFormat(chat_template=override))
    assert tokenizer.decode(ids) == "[user] Hi\n[assistant] Hello.\n<|endoftext|>"
    assert tokenizer.decode([t for t, keep in zip(ids, learned) if keep]) == "Hello.\n<|endoftext|>"


def test_the_override_is_read_from_a_file(tmp_path):
    from training.data import chat_template_text

    (tmp_path / "chat.jinja").write_text("{{ messages }}")
    assert chat_template_text(str(tmp_path / "chat.jinja")) == "{{ messages }}"


@pytest.mark.parametrize("value, message", [
    ("/templates/chat.html", r"--chat-template: '/templates/chat.html' must be a .jinja/.j2/.txt file or a Hub model id"),
    ("just-a-name", r"--chat-template: 'just-a-name' must be a .jinja/.j2/.txt file or a Hub model id"),
    ("/tmp/my template.jinja", r"--chat-template: '/tmp/my template.jinja' may hold only"),
])
def test_bad_chat_template_settings_are_one_line(value, message):
    from training.config import ConfigError, TrainConfig
    from training.config_rules import validate

    with pytest.raises(ConfigError, match=message):
        validate(TrainConfig(chat_template=value))


def test_a_missing_template_file_is_found_before_ray_starts(tmp_path):
    from training.config import ConfigError, TrainConfig
    from training.inputs import check_inputs

    with pytest.raises(ConfigError, match=r"--chat-template: '.*missing.jinja' is not a file on this machine"):
        check_inputs(TrainConfig(chat_template=str(tmp_path / "missing.jinja")))


def test_openai_style_string_arguments_are_rendered_once_not_double_quoted(tokenizer):
    call = {"type": "function", "function": {"name": "get_quota", "arguments": '{"code": "L-DB2E81BA", "note": ""}'}}
    record = {"messages": [{"role": "user", "content": "G quota?"},
                           {"role": "assistant", "content": None, "tool_calls": [call]}]}
    assert learned_text(tokenizer, record).startswith(
        '<tool_call>\n{"name": "get_quota", "arguments": {"code": "L-DB2E81BA", "note": ""}}')


def test_arguments_that_are_not_json_are_refused(tokenizer):
    call = {"type": "function", "function": {"name": "get_quota", "arguments": "code=L-DB2E81BA"}}
    record = {"messages": [{"role": "user", "content": "G quota?"},
                           {"role": "assistant", "content": None, "tool_calls": [call]}]}
    with pytest.raises(DataError, match=r"a tool call's arguments are not JSON; record"):
        tokenize_records([record], tokenizer, DataFormat())


def test_an_empty_system_turn_is_kept_as_written(tokenizer):
    record = {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello."}]}
    [(ids, _, _)] = tokenize_records([record], tokenizer, DataFormat())
    assert tokenizer.decode(ids).startswith("<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi")


def test_a_template_that_only_lays_out_an_empty_system_turn_differently_keeps_its_chats(tokenizer):
    # Like Mistral's: a system turn's text goes before the first user message, followed by a blank line.
    template = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] + '\n\n' }}"
                "{% elif m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]{% else %}{{ m['content'] }}</s>"
                "{% endif %}{% endfor %}")
    record = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    [(ids, _, _)] = tokenize_records([record], tokenizer, DataFormat(chat_template=template, default_system_prompt=False))
    assert tokenizer.decode(ids).startswith("[INST] Hi [/INST]")
