"""training.inputs on s3:// inputs that S3 itself refuses (a ClientError, not a missing key): a bucket that does not
exist, or that these credentials may not list, is one line naming the option and S3's error code, before Ray starts."""

from __future__ import annotations

import pytest

from training.config import ConfigError, TrainConfig
from training.config_rules import validate
from training.inputs import check_inputs
from tests.training.test_inputs_cases import s3  # noqa: F401 (the fixture: a moto bucket holding data/train.jsonl)


@pytest.mark.parametrize("option, changes", [
    ("--data", {"data": "s3://gone-bucket/train.jsonl"}),
    ("--val-data", {"val_data": "s3://gone-bucket/val.jsonl"}),
    ("--chat-template", {"chat_template": "s3://gone-bucket/chat.jinja"}),
    ("--model", {"model": "s3://gone-bucket/models/m"}),
])
def test_an_input_in_a_bucket_that_does_not_exist_is_one_line_naming_its_option(s3, option, changes):
    # S3 answers ListObjectsV2 on a missing bucket with the NoSuchBucket error code (a botocore ClientError).
    cfg = validate(TrainConfig(**({"model": "o/m", "data": "s3://data-bucket/data/train.jsonl"} | changes)))
    with pytest.raises(ConfigError, match=rf"^{option}: cannot read s3://gone-bucket/\S+: An error occurred "
                                          r"\(NoSuchBucket\) when calling the ListObjectsV2 operation"):
        check_inputs(cfg)


def test_an_s3_data_folder_with_objects_under_it_passes(s3):
    """--data may name a prefix (a folder of files): any object under it is enough."""
    check_inputs(validate(TrainConfig(model="o/m", data="s3://data-bucket/data")))
