"""pack's truncation count: a chat longer than a block is cut (its tail is lost, counted), plain text longer than a
block is split into block-sized pieces (nothing is lost, nothing counted)."""

import numpy as np

from training.data import pack

SEQ_LEN, PAD = 4, 0


def test_long_plain_text_is_split_into_pieces_and_not_counted_as_truncated():
    ids = list(range(1, 11))  # 10 tokens: pieces of 4, 4 and 2
    out = pack([(ids, [True] * 10, False)], SEQ_LEN, PAD)
    assert out["truncated"].tolist() == [0, 0, 0]
    assert sorted(out["real_tokens"].tolist()) == [2, 4, 4]  # every token kept


def test_a_long_chat_is_truncated_to_one_block_and_counted():
    ids = list(range(1, 11))
    out = pack([(ids, [False] * 3 + [True] * 7, True)], SEQ_LEN, PAD)
    assert out["truncated"].tolist() == [1] and out["real_tokens"].tolist() == [4]
    assert np.array_equal(out["input_ids"][0], [1, 2, 3, 4])
