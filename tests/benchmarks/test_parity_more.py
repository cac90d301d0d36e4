"""benchmarks/parity.py: which data each phase of a run reads (the warm start, the branches, the validation)."""

from __future__ import annotations

import argparse
import socket

import pytest

from benchmarks import parity


def small_corpus(root):
    """Twenty small source files: a corpus of a few kB, enough blocks for a few steps at seq_len 32."""
    for i in range(20):
        (root / f"m{i}.py").write_text(f"def f{i}():\n    return {i}\n" * 40)
    return root


@pytest.fixture(scope="module")
def orders_read(tmp_path_factory):
    """One in-process CPU run (tiny model, one warm step, one step of bf16 order 2) over a small corpus, recording
    each stream order_batches is asked for: (training or held out, data order), in call order."""
    root = small_corpus(tmp_path_factory.mktemp("corpus"))
    real_corpus, real_order_batches = parity.corpus, parity.order_batches
    streams, calls = {}, []

    def corpus(_root, validation):
        streams[validation] = real_corpus(root, validation)
        return streams[validation]

    def order_batches(stream, seq_len, micro_batch, order, rank, world):
        calls.append(("held out" if stream is streams.get(True) else "training", order))
        return real_order_batches(stream, seq_len, micro_batch, order, rank, world)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parity, "corpus", corpus)
        patch.setattr(parity, "order_batches", order_batches)
        for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)), ("RANK", "0"),
                            ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
            patch.setenv(name, value)
        args = argparse.Namespace(out=str(tmp_path_factory.mktemp("out")), model="tiny", warm_steps=1, steps=1,
                                  seq_len=32, micro_batch=2, eval_batches=1, cpu=True,
                                  branches=[("bf16, order 2", "bf16", 2)], tolerance_from=None, plot=None)
        parity.run(args)
    return calls


def test_the_warm_start_trains_in_data_order_0_which_no_branch_takes(orders_read):
    """Branches are orders 1 to 9 (parity.BRANCH_NAME): a warm start in one of them would make that order's
    branches (the control's, fp8's) begin on the very blocks the warm start just trained on."""
    training = [order for stream, order in orders_read if stream == "training"]
    assert training == [0, 2]  # the warm start, then the branch in its own order


def test_the_validation_is_read_from_the_held_out_files_in_order_0(orders_read):
    assert [call for call in orders_read if call[0] == "held out"] == [("held out", 0)]
