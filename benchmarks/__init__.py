"""GPU benchmarks of the trainer, its kernel profile and SFT figures, and the tiny model for local runs and tests."""
