"""Ray Train + FSDP2 fine-tuning of Qwen2.5, the same code on a laptop, a GPU box and EKS."""
