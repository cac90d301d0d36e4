"""The refusal of a family the trainer does not train names it and what is supported; a multimodal Gemma 3 is told
which checkpoints it can train instead."""

from training.families import MODEL_TYPES, supported_architecture


def test_a_multimodal_gemma3_is_pointed_to_its_text_only_checkpoints():
    refusal = supported_architecture({"model_type": "gemma3"})
    assert refusal.startswith("the model's architecture 'gemma3' (a multimodal Gemma 3: train its text-only "
                              "gemma3_text checkpoints) is not one whose loss the trainer checks; supported: ")


def test_another_family_is_refused_without_the_gemma3_hint():
    assert supported_architecture({"model_type": "bert"}) == (
        f"the model's architecture 'bert' is not one whose loss the trainer checks; supported: {', '.join(MODEL_TYPES)}")


def test_gemma3_text_is_trained():
    assert supported_architecture({"model_type": "gemma3_text"}) is None
