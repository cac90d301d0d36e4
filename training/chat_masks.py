"""Which tokens of a rendered chat are the assistant's: what assistant-only loss learns.

The chat is rendered once, whole, with the model's template (or --chat-template), and the tokens learned
are the assistant's in that render, found one of two ways:

- a template that marks the assistant's text with {% generation %} ... {% endgeneration %} (TRL's
  training templates): those spans, as transformers' return_assistant_tokens_mask reads them, which is
  what TRL's SFTTrainer learns with assistant_only_loss;
- any other template: each assistant turn located in the whole render. The chat is rendered again with
  that turn's content replaced by a marker (by two of different lengths: the rest of the render must not
  change with the turn's text); where the renders differ is the turn's own text. The
  turn is learned from the end of its header (the text the template writes as a generation prompt) to
  the end of its close (the text after the turn when it is the conversation's last: an end-of-turn token).
  A template may render a turn differently once later turns follow it (Qwen3's drops the <think> block of
  every reply before the last user query): what is learned is what the whole render holds.

TRL instead swaps a known template for a patched copy of its own (Qwen3's: a <think> block in every reply);
this trainer learns the render of the template the model ships and the export carries, and uses a
template's generation spans when it has them (TRL's qwen3_training.jinja, given as --chat-template).
"""

from __future__ import annotations

import os
import re

from training.sources import DataError

MARKER = "\ue000REPLY\ue000"  # a private-use character: no real chat holds it
OTHER_MARKER = "\ue001ANOTHER REPLY\ue001"  # a second one, of another length
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")  # transformers' test for the tag (render_jinja_template)
CANNOT_LOCATE = ("--assistant-only-loss: the chat template renders the assistant message at index {} so that it "
                 "cannot be located in the whole chat ({}); give a template with {{% generation %}} spans "
                 "(--chat-template), or train on every token with --no-assistant-only-loss")


def render(tokenizer, messages: list[dict], tools, template: str | None = None, **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False, **kwargs)


def template_text(tokenizer, template: str | None) -> str:
    text = template if template is not None else getattr(tokenizer, "chat_template", None)
    return text if isinstance(text, str) else ""


def has_generation_spans(tokenizer, template: str | None = None) -> bool:
    return GENERATION_TAG.search(template_text(tokenizer, template)) is not None


def learned_tokens(messages: list[dict], tokenizer, rendered: str, ids: list[int], offsets, tools=None,
                   template: str | None = None) -> list[bool]:
    """Which of the render's tokens (ids, with their character offsets) belong to the assistant."""
    if has_generation_spans(tokenizer, template):
        out = tokenizer.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=True,
                                            return_dict=True, return_assistant_tokens_mask=True)
        if list(out["input_ids"]) != list(ids):
            raise DataError("--assistant-only-loss: the chat template's generation spans were read from a render "
                            "that tokenizes differently; train on every token with --no-assistant-only-loss")
        return [bool(m) for m in out["assistant_masks"]]
    spans = assistant_spans(messages, tokenizer, rendered, tools, template)
    return [any(start <= begin < end for start, end in spans) for begin, _ in offsets]


def _header(tokenizer, before: list[dict], tools, template: str | None) -> str | None:
    """The text the template writes to open an assistant turn after `before`: its generation prompt."""
    try:
        plain = render(tokenizer, before, tools, template)
        prompted = render(tokenizer, before, tools, template, add_generation_prompt=True)
    except Exception:  # the template's own refusal of a chat that ends there: no header to go by
        return None
    return prompted[len(plain):] if prompted.startswith(plain) and len(prompted) > len(plain) else None


def _marked(message: dict, marker: str) -> dict:
    """An assistant turn whose content is `marker` alone, in the form the turn's content has: a template that
    iterates text parts renders a part, not a string."""
    return {"role": "assistant",
            "content": [{"type": "text", "text": marker}] if isinstance(message.get("content"), list) else marker}


def _around(tokenizer, messages: list[dict], j: int, marker: str, tools, template: str | None) -> tuple[str, str]:
    """The render of the chat with turn j's content replaced by `marker`: (the text before it, the text after it)."""
    other = render(tokenizer, messages[:j] + [_marked(messages[j], marker)] + messages[j + 1:], tools, template)
    if other.count(marker) != 1:
        raise DataError(CANNOT_LOCATE.format(j, "its text is not rendered once"))
    before, after = other.split(marker)
    return before, after


def assistant_spans(messages: list[dict], tokenizer, rendered: str, tools=None,
                    template: str | None = None) -> list[tuple[int, int]]:
    """Character spans of the assistant turns in `rendered`, the render of the whole chat."""
    spans: list[tuple[int, int]] = []
    for j, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before, after = _around(tokenizer, messages, j, MARKER, tools, template)
        # The rest of the chat must not change with the turn's text: two texts of different lengths tell.
        other_before, other_after = _around(tokenizer, messages, j, OTHER_MARKER, tools, template)
        if other_after != after or not rendered.endswith(after):
            raise DataError(CANNOT_LOCATE.format(j, "the turns after it change with its text"))
        differs = len(os.path.commonprefix([rendered, before]))  # where the turn's own text starts, at the latest
        text_end = len(rendered) - len(after)
        lower = spans[-1][1] if spans else 0
        if other_before != before or not lower <= differs <= text_end:
            raise DataError(CANNOT_LOCATE.format(j, "the turns before it change with its text"))
        # The turn starts after its header: the header may be followed by text the template writes itself
        # (Qwen3's empty <think> block on the last reply), which the model generates, so it is learned.
        header = _header(tokenizer, messages[:j] if j else [{"role": "user", "content": MARKER}], tools, template)
        at = before.rfind(header, lower, differs) if header else -1
        start = at + len(header) if at >= 0 else differs
        # ...and ends after the template's close of the turn, as it renders the turn as the last one.
        last = render(tokenizer, messages[:j] + [_marked(message, MARKER)], tools, template)
        close = last[last.index(MARKER) + len(MARKER):] if MARKER in last else ""
        if not after.startswith(close):
            raise DataError(CANNOT_LOCATE.format(j, "its end is written differently inside the chat"))
        spans.append((start, text_end + len(close)))
    return spans
