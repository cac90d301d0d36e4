"""Who may talk to the Ray pods: NetworkPolicies of the training namespace, and their meaning.

The VPC CNI enforces these once its network-policy agent is on (cdk_constructs/vpc_cni.py). The
namespace denies all ingress by default; Ray pods accept each other (GCS, raylets, object store,
NCCL bootstrap over TCP); the head's job API and dashboard (8265) also accept the KubeRay operator,
which polls job status there, and the RayJob's submitter pod, which runs `ray job submit`. Egress is
left open: the pods download images, weights and data, and write checkpoints. EFA traffic is
OS-bypass, not IP, and is not subject to these.
"""

from __future__ import annotations

from dataclasses import dataclass

DASHBOARD_PORT = 8265
# Labels KubeRay puts on the pods it creates (ray-operator/controllers/ray/common: labelPod,
# getSubmitterTemplate), and the operator chart's own selector label.
RAY_NODE = {"ray.io/is-ray-node": "yes"}
RAY_HEAD = {"ray.io/node-type": "head"}
RAYJOB_SUBMITTER = {"ray.io/originated-from-crd": "RayJob"}
KUBERAY_OPERATOR = {"app.kubernetes.io/name": "kuberay-operator"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _policy(name: str, namespace: str, selected: dict, ingress: list[dict]) -> dict:
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {"matchLabels": dict(selected)} if selected else {},
                 "policyTypes": ["Ingress"], "ingress": ingress},
    }


def training_network_policies(namespace: str, operator_namespace: str) -> list[dict]:
    return [
        _policy("default-deny-ingress", namespace, {}, []),
        _policy("ray-nodes-from-each-other", namespace, RAY_NODE, [{"from": [{"podSelector": {"matchLabels": dict(RAY_NODE)}}]}]),
        _policy("ray-head-job-api", namespace, RAY_HEAD, [{
            "from": [
                {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: operator_namespace}},
                 "podSelector": {"matchLabels": dict(KUBERAY_OPERATOR)}},
                {"podSelector": {"matchLabels": dict(RAYJOB_SUBMITTER)}},
            ],
            "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}],
        }]),
    ]


# ---------------------------------------------------------------- what the policies mean


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict

    def namespace_labels(self) -> dict:
        return {NAMESPACE_NAME_LABEL: self.namespace}


def _matches(selector: dict, labels: dict) -> bool:
    """A label selector with matchLabels (all this project uses); {} selects everything."""
    if set(selector) - {"matchLabels"}:
        raise ValueError(f"selector {selector} uses more than matchLabels")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer_matches(peer: dict, source: Pod, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return False  # pod-to-pod traffic is judged by pod and namespace selectors
    pods, namespaces = peer.get("podSelector"), peer.get("namespaceSelector")
    if namespaces is None and source.namespace != policy_namespace:
        return False
    if namespaces is not None and not _matches(namespaces, source.namespace_labels()):
        return False
    return pods is None or _matches(pods, source.labels)


def ingress_allowed(policies: list[dict], source: Pod, target: Pod, port: int, protocol: str = "TCP") -> bool:
    """Kubernetes NetworkPolicy ingress semantics: a pod selected by any Ingress policy is isolated and
    accepts only what some selecting policy's rule allows (peers and ports); an unselected pod accepts all."""
    selecting = [p for p in policies if p["metadata"]["namespace"] == target.namespace
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
                 and _matches(p["spec"].get("podSelector") or {}, target.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers, ports = rule.get("from"), rule.get("ports")
            peer_ok = not peers or any(_peer_matches(peer, source, target.namespace) for peer in peers)
            port_ok = not ports or any(p.get("port") in (None, port) and p.get("protocol", "TCP") == protocol for p in ports)
            if peer_ok and port_ok:
                return True
    return False
