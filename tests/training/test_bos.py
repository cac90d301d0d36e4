"""BOS follows the tokenizer's own rule, as TRL tokenizes: plain text gets the special tokens the tokenizer
adds (a BOS for Llama, Mistral, Gemma), none where it adds none (Qwen); a chat keeps exactly the one BOS
its template writes (the template's {{ bos_token }}), never a second one.

The tokenizers are built here, Llama-style: a BOS added by the post-processor ("<s> $A", as Llama's
tokenizer.json declares it) or no post-processor at all."""

from __future__ import annotations

import pytest

from training.data import DataFormat, tokenize_records

WORDS = ["<s>", "</s>", "<unk>", "<user>", "<assistant>", "NCCL", "reduces", "gradients", "what", "does", "do"]
BOS, EOS = 0, 1
# Llama-2's layout: the template opens with bos_token and closes each reply with eos_token.
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<{{ m.role }}> {{ m.content }} "
            "{% if m.role == 'assistant' %}{{ eos_token }} {% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<assistant> {% endif %}")


def llama_style(adds_bos: bool):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if adds_bos:
        backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", BOS)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<user>", "<assistant>"]})
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def ids_of(tokenizer, record: dict) -> list[int]:
    [(ids, _, _)] = tokenize_records([record], tokenizer, DataFormat())
    return ids


@pytest.mark.parametrize("adds_bos, expected", [(True, [BOS, 5, 6, 7, EOS]), (False, [5, 6, 7, EOS])])
def test_plain_text_gets_the_tokenizers_own_bos(adds_bos, expected):
    assert ids_of(llama_style(adds_bos), {"text": "NCCL reduces gradients"}) == expected


def test_a_chat_keeps_exactly_the_templates_one_bos():
    chat = {"messages": [{"role": "user", "content": "what does NCCL do"}, {"role": "assistant", "content": "NCCL reduces gradients"}]}
    ids = ids_of(llama_style(True), chat)
    assert ids[0] == BOS and ids.count(BOS) == 1
