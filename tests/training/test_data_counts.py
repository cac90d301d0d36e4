"""What the step log says the data held: padding, truncated chats, documents and blocks with nothing
to learn; tokens/s counting real tokens."""

from __future__ import annotations

import pytest
import torch

from training.data import pack
from training.data_plan import empty_batch
from training.loss import IGNORE_INDEX
from training.metrics import DataCounts, Throughput
from training.records import parse_record


def test_pack_counts_what_each_block_holds():
    # seq_len 8. A 12-token chat is cut to 8 (truncated; its only learned tokens were 9..11, so nothing
    # is left to learn); a 5-token text learns 4 targets; a 2-token text 1. Best fit, longest first:
    # block 0 = the chat (8 real tokens); block 1 = the 5-token and the 2-token text (7 real, 1 pad).
    chat = (list(range(100, 112)), [False] * 9 + [True] * 3, True)
    text = (list(range(200, 205)), [True] * 5, False)
    short = ([300, 301], [True, True], False)
    out = pack([chat, text, short], seq_len=8, pad_id=0)
    assert out["real_tokens"].tolist() == [8, 7]
    assert out["truncated"].tolist() == [1, 0]
    assert out["unlearned"].tolist() == [1, 0]


def test_a_chat_of_exactly_one_block_is_not_truncated_and_one_token_more_is():
    # seq_len 8: a chat of 8 tokens fills its block whole; a chat of 9 loses its last token.
    exact = pack([(list(range(1, 9)), [True] * 8, True)], seq_len=8, pad_id=0)
    longer = pack([(list(range(1, 10)), [True] * 9, True)], seq_len=8, pad_id=0)
    assert exact["truncated"].tolist() == [0]
    assert longer["truncated"].tolist() == [1]


def test_counts_sum_micro_batches_and_flag_blocks_with_nothing_to_learn():
    learned = {"input_ids": torch.zeros((2, 4), dtype=torch.int64),
               "labels": torch.tensor([[1, 2, IGNORE_INDEX, IGNORE_INDEX], [IGNORE_INDEX] * 4]),
               "position_ids": torch.zeros((2, 4), dtype=torch.int64),
               "real_tokens": torch.tensor([3, 4]), "truncated": torch.tensor([0, 1]), "unlearned": torch.tensor([0, 1])}
    counts = DataCounts()
    drawn = list(counts.counted(iter([learned, empty_batch(4)])))
    assert len(drawn) == 2
    # 2 x 4 + 1 x 4 tokens; 3 + 4 + 0 real; the second row and the empty batch learn nothing.
    assert counts.drain() == [12, 7, 1, 1, 2] and counts.drain() == [0, 0, 0, 0, 0]


def test_summed_counts_are_taken_since_the_last_take_and_kept_in_the_total():
    """Two steps' sums over the workers (what train_step hands back), then a take; a third step, then a take."""
    counts = DataCounts()
    counts.add([8.0, 6.0, 1.0, 0.0, 0.0])
    counts.add([8.0, 7.0, 0.0, 1.0, 1.0])
    assert counts.take() == {"tokens": 16, "real_tokens": 13, "truncated": 1, "unlearned": 1, "empty_blocks": 1}
    counts.add([8.0, 8.0, 0.0, 0.0, 0.0])
    assert counts.take()["tokens"] == 8 and counts.total["tokens"] == 24 and counts.total["real_tokens"] == 21


def test_synthetic_batches_count_every_token_as_real():
    counts = DataCounts()
    list(counts.counted(iter([{"input_ids": torch.zeros((2, 8)), "labels": torch.ones((2, 8), dtype=torch.int64)}])))
    tokens, real_tokens, _, _, empty_blocks = counts.drain()
    assert tokens == real_tokens == 16 and empty_blocks == 0


def test_throughput_counts_real_tokens_not_padding(monkeypatch):
    clock = iter([100.0, 102.0])
    monkeypatch.setattr("training.metrics.time.perf_counter", lambda: next(clock))
    meter = Throughput(tokens_per_step_per_gpu=4096, flops_per_tok=1e9, peak_tflops=100.0)
    # Two steps in 2 s; 6,144 of their 8,192 tokens per GPU were real: 3,072 tok/s, 3.072 TFLOP/s, 3.07% MFU.
    stats = meter.stats(2, 10, 1.0, 1e-4, 1.0, 0.0, real_tokens_per_gpu=6144)
    assert stats.tokens_per_s_per_gpu == pytest.approx(3072)
    assert stats.mfu == pytest.approx(0.03072)


def test_the_step_line_shows_padding_and_what_was_lost():
    meter = Throughput(4096, 1e9, None)
    stats = meter.stats(1, 10, 2.0, 1e-4, 1.0, 0.0)
    stats.padding, stats.truncated, stats.unlearned, stats.empty_blocks = 0.125, 3, 1, 0
    assert stats.line().endswith("| pad 12.5% trunc 3 unlearned 1 empty 0")
    assert parse_record(stats.record())["padding"] == 0.125
