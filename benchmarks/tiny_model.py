"""A tiny Qwen2 and a byte-level BPE tokenizer with a ChatML chat template, trained on a local corpus
and saved as a Hugging Face model folder: real data end to end with no download (tests, the
local SFT demo). `python -m benchmarks.tiny_model OUT [--corpus FILE]`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

# ChatML, the layout of Qwen2.5's template, without its default system turn.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 448  # within the tiny config's 512: the byte alphabet, the special tokens and the corpus's merges


def corpus_texts(path: Path) -> list[str]:
    """Every text of a JSONL corpus: `text` records, and the roles and contents of `messages` ones."""
    texts = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "text" in record:
            texts.append(record["text"])
        for message in record.get("messages", []):
            texts.append(f"{message['role']} {message['content']}")
    return texts


def save_tiny_model(folder: str | Path, corpus: str | Path, seed: int = 0) -> str:
    """Tokenizer and a randomly initialised tiny Qwen2, in `folder`. The tokenizer is byte-level BPE
    like Qwen2.5's (any text encodes; transformers loads it as a Qwen2 tokenizer), its merges
    learned from the corpus."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from training.model import builtin_config

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus_texts(Path(corpus)), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    config = builtin_config("tiny")
    config.vocab_size = len(fast)
    config.eos_token_id = config.pad_token_id = fast.eos_token_id
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tiny_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write the model and tokenizer to")
    parser.add_argument("--corpus", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "chat.jsonl"))
    args = parser.parse_args(argv)
    print(save_tiny_model(args.out, args.corpus))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
