"""planning/fp8.py's review line where fp8 cannot run: the reason, never a predicted gain."""

import pytest

from planning import fp8
from planning.workload import MODELS, Workload
from training.gpus import GPUS

QWEN = MODELS["qwen2.5-1.5b"]
WORK = Workload(seq_len=2048, micro_batch=4, grad_accum=1, activation_checkpointing="none", loss_chunk_tokens=2048)


@pytest.mark.parametrize("gpu, lora_rank, line", [
    ("A10G", 0, "fp8: not available: the A10G has no FP8 tensor cores"),   # Ampere: no FP8 tensor cores
    ("T4", 16, "fp8: not available: the T4 has no FP8 tensor cores"),      # the GPU is named before LoRA
    ("L4", 16, "fp8: not available: LoRA trains in bf16 (fp8 trains full weights)"),
])
def test_the_review_line_says_why_fp8_is_not_available(gpu, lora_rank, line):
    assert fp8.fp8_line(GPUS[gpu], WORK, QWEN, lora_rank=lora_rank) == line


def test_the_review_line_on_an_fp8_gpu_is_a_prediction():
    assert fp8.fp8_line(GPUS["L4"], WORK, QWEN).startswith("fp8: predicted ")
