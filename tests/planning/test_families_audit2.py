"""planning.families refuses a shape field that is not a positive integer, a JSON true included."""

from __future__ import annotations

import pytest

from planning.families import ShapeError, count_shape

QWEN2 = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512}


@pytest.mark.parametrize("field,value", [("num_hidden_layers", True), ("hidden_size", 0), ("vocab_size", "512"),
                                         ("intermediate_size", 128.0)])
def test_a_shape_field_that_is_not_a_positive_integer_is_refused_by_name(field, value):
    with pytest.raises(ShapeError, match=rf"^m: config.json has no positive integer '{field}' \(got {value!r}\)$"):
        count_shape(QWEN2 | {field: value}, "m")


def test_the_valid_config_counts():
    assert count_shape(QWEN2, "m")["layers"] == 2
