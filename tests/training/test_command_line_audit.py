"""--grad-accum and --batch-tokens are exclusive whatever the accumulation's value, 1 (its default) included."""

import pytest

from training.command_line import parse_args
from training.config import ConfigError


@pytest.mark.parametrize("accum", ["1", "16"])
def test_any_grad_accum_given_with_batch_tokens_is_refused(accum):
    """2 workers x 4 x 512 tokens: --batch-tokens 65536 makes 16 rounds; a --grad-accum given beside it, even the one
    the batch gives or the default 1, is the user's second answer to the same question: refused, not overridden."""
    with pytest.raises(ConfigError, match=f"^--grad-accum: {accum} and --batch-tokens 65536 are exclusive"):
        parse_args(["--workers", "2", "--micro-batch", "4", "--seq-len", "512", "--batch-tokens", "65536",
                    "--grad-accum", accum])


def test_batch_tokens_alone_sets_the_accumulation():
    assert parse_args(["--workers", "2", "--micro-batch", "4", "--seq-len", "512", "--batch-tokens", "65536"]).grad_accum == 16
