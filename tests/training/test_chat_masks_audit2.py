"""training.chat_masks on a reply that opens the chat, under a template like Qwen's: a default system line unless
the chat opens with one (the template reads messages[0], so it cannot render an empty chat), and the last reply
opened by an empty thinking block the template writes itself, which the model generates and so learns. One token
per character, so the learned characters are the learned text."""

from __future__ import annotations

import pytest

from training.chat_masks import learned_tokens

TEMPLATE = ("{% if messages[0].role != 'system' %}S: default\n{% endif %}"
            "{% for m in messages %}{% if m.role == 'assistant' %}A: {% if loop.last %}<t></t>{% endif %}"
            "{% else %}U: {% endif %}{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}A: {% endif %}")


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"x": 0}, unk_token="x")))


def learned(tokenizer, messages: list[dict]) -> tuple[str, str]:
    rendered = tokenizer.apply_chat_template(messages, chat_template=TEMPLATE, tokenize=False)
    mask = learned_tokens(messages, tokenizer, rendered, [0] * len(rendered),
                          [(i, i + 1) for i in range(len(rendered))], template=TEMPLATE)
    return rendered, "".join(c for c, keep in zip(rendered, mask) if keep)


@pytest.mark.parametrize("messages", [
    [{"role": "assistant", "content": "Hello."}],  # the reply opens the chat: its header is found after a user turn
    [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}],
])
def test_the_thinking_block_the_template_writes_after_the_header_is_learned(tokenizer, messages):
    rendered, text = learned(tokenizer, messages)
    assert rendered.endswith("A: <t></t>Hello.\n")
    assert text == "<t></t>Hello.\n"  # from the end of the header 'A: ', not from the reply's own text


def test_generation_spans_read_from_a_render_of_other_tokens_of_the_same_count_are_refused(tokenizer):
    # The spans index the template's own tokenization: token ids that differ from it, even at the same count, are
    # not the tokens the mask was read for.
    from training.sources import DataError

    template = ("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
                "{% else %}{{ m.content }}{% endif %}{% endfor %}")
    messages = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    ids = list(tokenizer.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=True)["input_ids"])
    rendered = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
    offsets = [(0, len(rendered))] * len(ids)
    assert len(learned_tokens(messages, tokenizer, rendered, ids, offsets, template=template)) == len(ids)
    with pytest.raises(DataError, match="generation spans were read from a render that tokenizes differently"):
        learned_tokens(messages, tokenizer, rendered, [i + 1 for i in ids], offsets, template=template)


REFUSES_OPEN_ENDS = ("{% if messages[-1].role == 'user' and not add_generation_prompt %}"
                     "{{ raise_exception('a chat must end with a reply') }}{% endif %}"
                     "{% for m in messages %}{% if m.role == 'assistant' %}A: {% if loop.last %}<t></t>{% endif %}"
                     "{% else %}U: {% endif %}{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}A: {% endif %}")


def test_a_template_that_refuses_the_chat_before_a_reply_learns_from_the_replys_own_text(tokenizer):
    """No header to go by (the template refuses a chat that ends on the user's turn): the turn starts where its own
    text starts, so the thinking block the template writes is not learned; the mask is still read, not refused."""
    messages = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    rendered = tokenizer.apply_chat_template(messages, chat_template=REFUSES_OPEN_ENDS, tokenize=False)
    mask = learned_tokens(messages, tokenizer, rendered, [0] * len(rendered),
                          [(i, i + 1) for i in range(len(rendered))], template=REFUSES_OPEN_ENDS)
    assert rendered == "U: Hi.\nA: <t></t>Hello.\n"
    assert "".join(c for c, keep in zip(rendered, mask) if keep) == "Hello.\n"


def test_a_reply_that_opens_the_render_finds_its_header_at_the_first_character(tokenizer):
    """The header 'A: ' sits at offset 0 when nothing precedes the reply: the thinking block after it is learned."""
    template = ("{% for m in messages %}{% if m.role == 'assistant' %}A: {% if loop.last %}<t></t>{% endif %}"
                "{% else %}U: {% endif %}{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}A: {% endif %}")
    messages = [{"role": "assistant", "content": "Hello."}]
    rendered = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
    mask = learned_tokens(messages, tokenizer, rendered, [0] * len(rendered),
                          [(i, i + 1) for i in range(len(rendered))], template=template)
    assert rendered == "A: <t></t>Hello.\n"
    assert "".join(c for c, keep in zip(rendered, mask) if keep) == "<t></t>Hello.\n"
