"""Built-in model configurations (random init, no download) and run settings."""

BUILTIN_MODELS = ("qwen2.5-1.5b", "tiny")
