"""training.export.source_files for a source model without a generation_config.json: the export carries the
defaults transformers derives from the model's config (its eos and bos tokens), as save_pretrained would."""

from __future__ import annotations

from training import data
from training.config import TrainConfig
from training.export import source_files
from training.model import builtin_config


def test_a_source_model_without_a_generation_config_exports_the_one_its_config_implies(tmp_path, monkeypatch):
    config = builtin_config("tiny")
    config.bos_token_id, config.eos_token_id, config.pad_token_id = 11, 12, 13
    (tmp_path / "config.json").write_text(config.to_json_string())  # a local model folder with no generation_config.json
    monkeypatch.setattr(data, "_tokenizer", lambda *args: "the source tokenizer")  # no tokenizer files needed here
    generation, tokenizer = source_files(TrainConfig(model=str(tmp_path)), config)
    # GenerationConfig.from_model_config copies the special tokens of the model's config.
    assert (generation.bos_token_id, generation.eos_token_id, generation.pad_token_id) == (11, 12, 13)
    assert tokenizer == "the source tokenizer"
    assert not (tmp_path / "generation_config.json").exists()
