"""Annotation keys the project puts on its Kubernetes objects and its tools read back (the synth review, the seam
harness), in a module without CDK so that those tools start without it."""

AUTO_ANNOTATION = "eks-fsdp-efa/auto"
"""On the RayJob: what the planner picked for the options left to auto, and why."""
IMAGE_SOURCE_ANNOTATION = "eks-fsdp-efa/image-source"
"""On a RayJob whose pods pull the image through a cache: the image they stand for (its upstream registry and
path), which the seam harness holds the cache rule against (tools/seams/registry.py)."""
