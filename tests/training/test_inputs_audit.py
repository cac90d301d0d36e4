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
