"""Cases of training.chat_masks on small templates written here, each render worked out by hand: which characters of
the whole render an assistant turn is learned as (from after its header to the end of its close), with the header's
text also in a user's message, a template with no generation prompt, a reply opening the chat, and the message a
refusal names. One token per character, so the learned characters are the learned text."""

from __future__ import annotations

import pytest

from training.chat_masks import assistant_spans, learned_tokens
from training.sources import DataError

# Roles written as 'U: ' and 'A: ', each turn closed by a newline; the generation prompt is 'A: '.
PLAIN = ("{% for m in messages %}{% if m.role == 'assistant' %}A: {% else %}U: {% endif %}{{ m.content }}\n{% endfor %}"
         "{% if add_generation_prompt %}A: {% endif %}")
CHAT = [{"role": "user", "content": "Why EFA?"}, {"role": "assistant", "content": "Bandwidth."},
        {"role": "user", "content": "And NCCL?"}, {"role": "assistant", "content": "It reduces."}]


@pytest.fixture(scope="module")
def tokenizer():
    """A tokenizer with no template of its own (each test gives one); the render needs no vocabulary."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"x": 0}, unk_token="x")))


def learned_text(tokenizer, messages: list[dict], template: str) -> tuple[str, list[str]]:
    """The render, and each run of learned characters (a token per character, as learned_tokens is given offsets)."""
    rendered = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
    learned = learned_tokens(messages, tokenizer, rendered, [0] * len(rendered),
                             [(i, i + 1) for i in range(len(rendered))], template=template)
    runs, run = [], ""
    for char, keep in zip(rendered + "\0", learned + [False]):
        if keep:
            run += char
        elif run:
            runs, run = runs + [run], ""
    return rendered, runs


def test_each_reply_is_learned_from_after_its_header_to_the_end_of_its_close(tokenizer):
    rendered, runs = learned_text(tokenizer, CHAT, PLAIN)
    assert rendered == "U: Why EFA?\nA: Bandwidth.\nU: And NCCL?\nA: It reduces.\n"
    assert runs == ["Bandwidth.\n", "It reduces.\n"]  # not 'A: ', not the next turn's 'U'


def test_the_header_written_in_a_users_message_is_not_where_the_reply_starts(tokenizer):
    chat = [{"role": "user", "content": "Reply as 'A: yes'"}, {"role": "assistant", "content": "A: yes"}]
    rendered, runs = learned_text(tokenizer, chat, PLAIN)
    assert rendered == "U: Reply as 'A: yes'\nA: A: yes\n"
    assert runs == ["A: yes\n"]


def test_a_reply_opening_the_chat_is_learned_without_its_header(tokenizer):
    chat = [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Hi."}]
    assert learned_text(tokenizer, chat, PLAIN)[1] == ["Hello.\n"]


def test_without_a_generation_prompt_a_reply_is_learned_from_its_own_text(tokenizer):
    # No header to go by: the reply starts where its text starts, not at the end of the previous reply.
    template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    rendered, runs = learned_text(tokenizer, CHAT, template)
    assert rendered == "[user] Why EFA?\n[assistant] Bandwidth.\n[user] And NCCL?\n[assistant] It reduces.\n"
    assert runs == ["Bandwidth.\n", "It reduces.\n"]


def test_spans_are_character_ranges_of_the_whole_render(tokenizer):
    rendered = tokenizer.apply_chat_template(CHAT, chat_template=PLAIN, tokenize=False)
    assert assistant_spans(CHAT, tokenizer, rendered, template=PLAIN) == [(15, 26), (42, 54)]
    assert [rendered[s:e] for s, e in [(15, 26), (42, 54)]] == ["Bandwidth.\n", "It reduces.\n"]


@pytest.mark.parametrize("chat, index", [(CHAT, 1), (CHAT[:2] + CHAT[2:3] + [{"role": "assistant", "content": "x"}], 1),
                                         ([CHAT[0], {"role": "assistant", "content": "Why EFA?"}], 1)])
def test_a_refusal_names_the_assistant_message_that_cannot_be_located(tokenizer, chat, index):
    # Every message rendered twice: no turn is one place in the render; the first assistant message is refused.
    template = "{% for m in messages %}{{ m.content }} ({{ m.content }}) {% endfor %}"
    rendered = tokenizer.apply_chat_template(chat, chat_template=template, tokenize=False)
    with pytest.raises(DataError, match=rf"renders the assistant message at index {index} so that it cannot be located"):
        assistant_spans(chat, tokenizer, rendered, template=template)


def test_system_and_tool_turns_are_not_learned(tokenizer):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Quota?"},
            {"role": "assistant", "content": "Asking."}, {"role": "tool", "content": "96"},
            {"role": "assistant", "content": "96 vCPUs."}]
    rendered, runs = learned_text(tokenizer, chat, PLAIN)
    assert rendered == "U: Be brief.\nU: Quota?\nA: Asking.\nU: 96\nA: 96 vCPUs.\n"
    assert runs == ["Asking.\n", "96 vCPUs.\n"]
