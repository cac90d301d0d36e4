"""The NetworkPolicy evaluator's reading of a peer, against the Kubernetes documentation's rules."""

from cdk_constructs.network_policies import Pod, ingress_allowed


def _policy(peer: dict) -> dict:
    return {"metadata": {"namespace": "training"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [peer]}]}}


def test_a_peer_with_only_a_namespace_selector_admits_every_pod_of_those_namespaces():
    # Kubernetes docs, "Network Policies": namespaceSelector alone selects namespaces "for which all Pods
    # should be allowed"; the source pod's own labels do not matter.
    policy = _policy({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}})
    target = Pod("training", {"ray.io/node-type": "head"})
    assert ingress_allowed([policy], Pod("monitoring", {"app": "anything"}), target, 8265)
    assert not ingress_allowed([policy], Pod("default", {"app": "anything"}), target, 8265)
