"""The seam harness: each synthesized template read as its consumers read it (CloudFormation, IAM, the
Kubernetes API server, the node), so a value that crosses into AWS, Kubernetes or the node and means
something else on the other side fails `make synth` instead of a deploy."""

from __future__ import annotations

from tools.seams import capacity, kube, node, order, registry, workloads
from tools.seams.cfn import resolve_template


def check_template(template: dict) -> list[str]:
    """Every broken seam of one synthesized template, one line each."""
    r = resolve_template(template)
    manifests = [obj for _, obj, _ in kube.manifests(r)]
    calls = workloads.all_calls(r, manifests) + registry.import_calls(r)
    return ([d.line() for d in workloads.denials(calls)]
            + kube.problems(r) + registry.problems(r) + node.problems(r, manifests) + order.problems(r)
            + capacity.problems(r))
