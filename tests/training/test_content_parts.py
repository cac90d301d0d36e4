"""Content given as a list of text parts (the OpenAI format) reaches each chat template in the form it
expects: joined into one string for a template written for strings, as vLLM serves such a template
(its chat_utils joins the text parts with a newline), and as parts for a template that iterates them.
A part that is not text is refused in one line naming the record.

qwen2.5-instruct.jinja is Qwen2.5-Instruct's own template (tests/data/SOURCES.md)."""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from training.data import DataError, DataFormat, tokenize_records
from benchmarks.tiny_model import save_tiny_model

QWEN25 = (DATA / "templates" / "qwen2.5-instruct.jinja").read_text()
# The branch of Qwen3's template that reads a message's content: a string, or nothing at all.
QWEN3_STYLE = (
    "{%- for message in messages %}{%- if message.content is string %}{%- set content = message.content %}"
    "{%- else %}{%- set content = '' %}{%- endif %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# A template that iterates parts itself, with its own separator.
PARTS_TEMPLATE = (
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' }}"
    "{%- if m.content is string %}{{- m.content }}{%- else %}"
    "{%- for part in m.content %}{{- part.text }}{%- if not loop.last %}{{- ' | ' }}{%- endif %}{%- endfor %}"
    "{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
PARTS = [{"type": "text", "text": "What does NCCL do?"}, {"type": "text", "text": "Be brief."}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", DATA / "chat.jsonl"))


def rendered(tokenizer, record: dict, template: str) -> str:
    [(ids, _, _)] = tokenize_records([record], tokenizer, DataFormat(chat_template=template))
    return tokenizer.decode(ids)


def test_text_parts_are_joined_for_qwen25s_template_as_vllm_joins_them(tokenizer):
    record = {"messages": [{"role": "user", "content": PARTS}, {"role": "assistant", "content": "It reduces."}]}
    as_vllm_serves = [{"role": "user", "content": "What does NCCL do?\nBe brief."}, {"role": "assistant", "content": "It reduces."}]
    expected = tokenizer.apply_chat_template(as_vllm_serves, chat_template=QWEN25, tokenize=False)
    assert rendered(tokenizer, record, QWEN25) == expected + tokenizer.eos_token


def test_a_reply_in_parts_is_learned_with_its_text_under_a_string_only_template(tokenizer):
    record = {"messages": [{"role": "user", "content": "What does NCCL do?"},
                           {"role": "assistant", "content": [{"type": "text", "text": "It reduces"},
                                                             {"type": "text", "text": "gradients."}]}]}
    [(ids, learned, _)] = tokenize_records([record], tokenizer, DataFormat(chat_template=QWEN3_STYLE))
    learned_text = tokenizer.decode([t for t, keep in zip(ids, learned) if keep])
    assert learned_text == "It reduces\ngradients.<|im_end|>\n<|endoftext|>"


def test_a_template_that_iterates_parts_still_gets_parts(tokenizer):
    record = {"messages": [{"role": "user", "content": PARTS}, {"role": "assistant", "content": "It reduces."}]}
    assert rendered(tokenizer, record, PARTS_TEMPLATE).startswith("<|im_start|>user\nWhat does NCCL do? | Be brief.<|im_end|>")


def test_an_image_part_is_refused_in_one_line_naming_the_record(tokenizer):
    record = {"id": "rec-9", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": "cat.png"}}]},
        {"role": "assistant", "content": "A cat."}]}
    with pytest.raises(DataError, match=r"user message holds a 'image_url' part.*record \{\"id\": \"rec-9\"") as refused:
        tokenize_records([record], tokenizer, DataFormat(chat_template=QWEN25))
    assert "\n" not in str(refused.value)


def test_a_reply_in_parts_is_located_under_a_template_that_iterates_parts(tokenizer):
    # Parts alone: a string (the marker assistant-only loss locates a turn with) would render as nothing here.
    parts_only = ("{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' }}{%- for part in m.content %}"
                  "{{- part.text }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endfor %}")
    record = {"messages": [{"role": "user", "content": PARTS},
                           {"role": "assistant", "content": [{"type": "text", "text": "It reduces."}]}]}
    [(ids, learned, _)] = tokenize_records([record], tokenizer, DataFormat(chat_template=parts_only))
    assert tokenizer.decode([t for t, keep in zip(ids, learned) if keep]) == "It reduces.<|im_end|>\n<|endoftext|>"
