"""Assistant-only loss learns exactly the assistant's tokens of the whole chat's render, with templates that
render a turn differently once later turns follow it: Qwen3's own template (tests/data/SOURCES.md) drops the
<think> block of every reply before the last user query, and opens the last reply with one, empty if the
reply has no reasoning. Expected renders and learned text are written out by hand from the template.

TRL's patched Qwen3 template marks the assistant's text with {% generation %}: its spans are learned, as
transformers' return_assistant_tokens_mask reads them. A template whose turns cannot be located is refused.
"""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from training.data import DataFormat, tokenize_records
from training.sources import DataError
from benchmarks.tiny_model import save_tiny_model

QWEN3 = (DATA / "templates" / "qwen3.jinja").read_text()
QWEN3_TRL_TRAINING = (DATA / "templates" / "qwen3-trl-training.jinja").read_text()

CHAT = [{"role": "user", "content": "Why EFA?"}, {"role": "assistant", "content": "Bandwidth."},
        {"role": "user", "content": "And NCCL?"}, {"role": "assistant", "content": "It reduces."}]
TWO_TURNS = {"messages": [
    {"role": "user", "content": "What does NCCL do?"},
    {"role": "assistant", "content": "<think>\nIt moves tensors.\n</think>\n\nIt reduces gradients."},
    {"role": "user", "content": "Over what?"},
    {"role": "assistant", "content": "<think>\nThe fabric.\n</think>\n\nOver EFA."}]}
CALL = {"type": "function", "function": {"name": "get_quota", "arguments": {"code": "L-DB2E81BA"}}}
TOOL = {"type": "function", "function": {"name": "get_quota", "parameters": {"type": "object"}}}
TOOL_CALL = {"tools": [TOOL], "messages": [
    {"role": "user", "content": "How many G vCPUs may I run?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "content": "96"},
    {"role": "assistant", "content": "You may run 96 vCPUs."}]}
# Qwen3's system turn for TOOL (the template's text, the tool as `tojson` writes it).
TOOLS_SYSTEM = ("<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                '{"type": "function", "function": {"name": "get_quota", "parameters": {"type": "object"}}}\n</tools>\n\n'
                "For each function call, return a json object with function name and arguments within "
                "<tool_call></tool_call> XML tags:\n<tool_call>\n"
                '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n')
CALL_TEXT = '<tool_call>\n{"name": "get_quota", "arguments": {"code": "L-DB2E81BA"}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", DATA / "chat.jsonl"))


def render_and_learned(tokenizer, record: dict, template: str) -> tuple[str, list[str]]:
    """The document's text, and each run of consecutive learned tokens as text."""
    [(ids, learned, _)] = tokenize_records([record], tokenizer, DataFormat(chat_template=template))
    runs, run = [], []
    for token, keep in zip(ids + [None], learned + [False]):
        if keep:
            run.append(token)
        elif run:
            runs.append(tokenizer.decode(run))
            run = []
    return tokenizer.decode(ids), runs


def test_qwen3_two_replies_learn_the_first_without_its_dropped_thinking(tokenizer):
    text, learned = render_and_learned(tokenizer, TWO_TURNS, QWEN3)
    assert text == ("<|im_start|>user\nWhat does NCCL do?<|im_end|>\n"
                    "<|im_start|>assistant\nIt reduces gradients.<|im_end|>\n"
                    "<|im_start|>user\nOver what?<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nThe fabric.\n</think>\n\nOver EFA.<|im_end|>\n<|endoftext|>")
    assert learned == ["It reduces gradients.<|im_end|>\n",
                       "<think>\nThe fabric.\n</think>\n\nOver EFA.<|im_end|>\n<|endoftext|>"]


def test_qwen3_tool_call_chat_learns_the_call_and_the_answer_not_the_tool_output(tokenizer):
    text, learned = render_and_learned(tokenizer, TOOL_CALL, QWEN3)
    assert text == (TOOLS_SYSTEM + "<|im_start|>user\nHow many G vCPUs may I run?<|im_end|>\n"
                    f"<|im_start|>assistant\n{CALL_TEXT}<|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\n96\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n<think>\n\n</think>\n\nYou may run 96 vCPUs.<|im_end|>\n<|endoftext|>")
    assert learned == [f"{CALL_TEXT}<|im_end|>\n",
                       "<think>\n\n</think>\n\nYou may run 96 vCPUs.<|im_end|>\n<|endoftext|>"]


def test_qwen3_reasoning_of_a_tool_step_is_dropped_once_the_user_asks_again(tokenizer):
    # While the tool steps answer the last query, the template keeps their reasoning; a later user turn drops it.
    step = {"role": "assistant", "content": None, "reasoning_content": "Look it up.", "tool_calls": [CALL]}
    record = {"tools": [TOOL], "messages": TOOL_CALL["messages"][:1] + [step] + TOOL_CALL["messages"][2:] + [
        {"role": "user", "content": "Thanks."}, {"role": "assistant", "content": "Glad to help."}]}
    text, learned = render_and_learned(tokenizer, record, QWEN3)
    assert "Look it up." not in text
    assert learned == [f"{CALL_TEXT}<|im_end|>\n", "You may run 96 vCPUs.<|im_end|>\n",
                       "<think>\n\n</think>\n\nGlad to help.<|im_end|>\n<|endoftext|>"]


def test_generation_spans_of_trls_qwen3_training_template_are_learned(tokenizer):
    text, learned = render_and_learned(tokenizer, TWO_TURNS, QWEN3_TRL_TRAINING)
    assert learned == ["<think>\nIt moves tensors.\n</think>\n\nIt reduces gradients.<|im_end|>\n",
                       "<think>\nThe fabric.\n</think>\n\nOver EFA.<|im_end|>\n<|endoftext|>"]
    assert text.startswith("<|im_start|>user\nWhat does NCCL do?<|im_end|>\n<|im_start|>assistant\n<think>\nIt moves")


def test_generation_spans_are_followed_where_they_differ_from_the_turn(tokenizer):
    # The span holds the reply alone, not its end-of-turn token: the template's choice, as transformers reads it.
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}"
                "{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}")
    record = {"messages": CHAT}
    assert render_and_learned(tokenizer, record, template)[1] == ["Bandwidth.", "It reduces."]
    [(ids, learned, _)] = tokenize_records([record], tokenizer, DataFormat(chat_template=template))
    out = tokenizer.apply_chat_template(CHAT, chat_template=template, return_dict=True, return_assistant_tokens_mask=True)
    assert ids[:-1] == out["input_ids"] and learned[:-1] == [bool(m) for m in out["assistant_masks"]]


@pytest.mark.parametrize("opening, closing", [("{%- generation %}", "{%- endgeneration %}"),
                                              ("{% generation -%}", "{% endgeneration -%}"),
                                              ("{%- generation -%}", "{%- endgeneration -%}")])
def test_generation_spans_in_jinjas_whitespace_control_forms_are_followed(tokenizer, opening, closing):
    # TRL's qwen3_training.jinja writes {%- generation %}; transformers' render_jinja_template tests for the tag with
    # optional '-' on either side. Its spans (the reply alone) are learned, not the located turn (reply and close).
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}:{% if m.role == 'assistant' %}" + opening +
                "{{ m.content }}" + closing + "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}")
    record = {"messages": CHAT}
    assert render_and_learned(tokenizer, record, template)[1] == ["Bandwidth.", "It reduces."]
    out = tokenizer.apply_chat_template(CHAT, chat_template=template, return_dict=True, return_assistant_tokens_mask=True)
    [(ids, learned, _)] = tokenize_records([record], tokenizer, DataFormat(chat_template=template))
    assert learned[:-1] == [bool(m) for m in out["assistant_masks"]]


@pytest.mark.parametrize("chat, template, why", [
    # Every message's text twice: the turn is not one place in the render.
    (CHAT, "{% for m in messages %}{{ m.content }} ({{ m.content }}) {% endfor %}", "its text is not rendered once"),
    # Each turn says how long the one before it was: later turns change with a reply's text...
    (CHAT, "{% for m in messages %}[after {{ (loop.previtem.content if loop.previtem else '') | length }}] "
     "{{ m.content }} {% endfor %}", "the turns after it change with its text"),
    # The same, the reply as long as the first marker (7 characters, chat_masks.MARKER): only the second one, of
    # another length, shows that the later turns change with its text.
    ([CHAT[0], {"role": "assistant", "content": "Use EFA"}] + CHAT[2:],
     "{% for m in messages %}[after {{ (loop.previtem.content if loop.previtem else '') | length }}] "
     "{{ m.content }} {% endfor %}", "the turns after it change with its text"),
    # ...or how long the next one is: earlier turns do.
    (CHAT, "{% for m in messages %}[before {{ (loop.nextitem.content if loop.nextitem else '') | length }}] "
     "{{ m.content }} {% endfor %}", "the turns before it change with its text"),
    # Every turn starred when the last reply thinks: a marker does not think, so the turns before it change.
    (CHAT[:3] + [{"role": "assistant", "content": "<think>x</think>It reduces."}],
     "{% for m in messages %}{% if '<think>' in messages[-1].content %}*{% endif %}{{ m.content }} {% endfor %}",
     "the turns before it change with its text"),
    # A turn ends with </s> when it is the last, with ' | ' inside the chat: where a reply ends is unknown.
    (CHAT, "{% for m in messages %}{{ m.content }}{% if loop.last %}</s>{% else %} | {% endif %}{% endfor %}",
     "its end is written differently inside the chat"),
], ids=["twice", "after", "after-as-long-as-the-marker", "before", "structure", "end"])
def test_a_template_whose_turns_cannot_be_located_is_refused_in_one_line(tokenizer, chat, template, why):
    with pytest.raises(DataError, match=rf"^--assistant-only-loss: the chat template renders the assistant message at "
                                        rf"index \d so that it cannot be located in the whole chat \({why}\); give a "
                                        r"template with \{% generation %\} spans.*--no-assistant-only-loss$") as refused:
        tokenize_records([{"messages": chat}], tokenizer, DataFormat(chat_template=template))
    assert "\n" not in str(refused.value)
