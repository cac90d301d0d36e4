"""The error a construct raises for a stack it refuses to build: app.py prints it as one line."""


class ConstructError(ValueError):
    """A synthesized value the other side (AWS, Kubernetes, the node) would refuse or mishandle.
    The message is one line that names the value, the limit and what to change."""
