"""training.inputs at its boundaries: a local model's positions against --seq-len."""

from __future__ import annotations

import json

import pytest

from training.config import ConfigError, TrainConfig
from training.config_rules import validate
from training.inputs import check_inputs


@pytest.mark.parametrize("seq_len, refused", [(512, False), (513, True), (514, True)])
def test_a_local_models_positions_are_all_usable_and_none_beyond(tmp_path, seq_len, refused):
    # max_position_embeddings 512: positions 0..511, so a 512-token sequence uses them all and 513 runs past them.
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    cfg = validate(TrainConfig(model=str(tmp_path), seq_len=seq_len))
    if not refused:
        try:
            check_inputs(cfg)
        except ConfigError as error:  # a later check may refuse this bare config.json; never for its positions
            assert "--seq-len" not in str(error)
        return
    with pytest.raises(ConfigError, match=rf"^--seq-len: {seq_len} exceeds the model's 512 positions "):
        check_inputs(cfg)


def test_s3_data_without_any_aws_credentials_is_one_line_naming_the_option(monkeypatch, tmp_path):
    """botocore raises NoCredentialsError (a BotoCoreError, not a ClientError) when no provider has credentials: the
    laptop user with an s3:// --data and no AWS login gets the one-line refusal before Ray starts, not a traceback."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask, and no network
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    import boto3

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # an earlier test's session keeps the credentials it found
    with pytest.raises(ConfigError, match=r"^--data: cannot read s3://data-bucket/train\.jsonl: Unable to locate "
                                          r"credentials$"):
        check_inputs(validate(TrainConfig(model="o/m", data="s3://data-bucket/train.jsonl")))
