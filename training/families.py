"""The model families the trainer trains, by config.json's model_type: torch-free, so that the synth (which runs
without torch) refuses another family in the same words as the trainer, from the model's cached config.json.

Each family's fused head and loss are checked against transformers' own forward(labels=...)
(tests/training/test_model_families.py); training.model holds their heads.
"""

from __future__ import annotations

MODEL_TYPES = ("cohere", "cohere2", "gemma", "gemma2", "gemma3_text", "glm", "granite", "llama", "mistral", "olmo",
               "olmo2", "phi", "phi3", "qwen2", "qwen3", "stablelm", "starcoder2")


def supported_architecture(config: dict) -> str | None:
    """Why the trainer refuses a model, from its config.json as a dict (one line), or None when it trains it."""
    model_type = config.get("model_type")
    if model_type in MODEL_TYPES:
        return None
    hint = " (a multimodal Gemma 3: train its text-only gemma3_text checkpoints)" if model_type == "gemma3" else ""
    return (f"the model's architecture {model_type!r}{hint} is not one whose loss the trainer checks; "
            f"supported: {', '.join(MODEL_TYPES)}")
