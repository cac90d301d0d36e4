"""planning.memory's terms on the tiny model, worked by hand (tiny: 107,072 parameters, root 32,832, 2 layers of
37,120, hidden 64, vocab 512; 1 x 8 tokens, no recomputation, one micro-batch, resharded, over 2 GPUs)."""

from __future__ import annotations

import pytest

from planning import calibration, memory, workload

TINY = workload.MODELS["tiny"]
# Everything but the loss chunk: state 642,432 + gradients 214,144 + gathered 214,144 + activations 47,104.
WITHOUT_LOSS = 1_117_824


@pytest.mark.parametrize("chunk_tokens,loss_bytes", [
    (4, 4 * 4 * 512),    # a chunk smaller than the micro-batch: the chunk's 4 tokens x vocab x 4 bytes
    (8, 4 * 8 * 512),    # exactly the micro-batch
    (16, 4 * 8 * 512),   # a chunk larger than the micro-batch holds only its 8 tokens
])
def test_the_loss_chunk_holds_at_most_the_micro_batchs_tokens(chunk_tokens, loss_bytes):
    work = workload.Workload(seq_len=8, micro_batch=1, grad_accum=1, activation_checkpointing=False,
                             loss_chunk_tokens=chunk_tokens)
    assert memory.memory_bytes(TINY, work, workload.Layout("full"), 2, calibration.CALIBRATION) == WITHOUT_LOSS + loss_bytes
