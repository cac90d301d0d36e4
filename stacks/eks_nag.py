"""cdk-nag rules for the native AWS::EKS::Cluster that aws_eks_v2 makes.

cdk-nag's own EKS rules (AwsSolutions-EKS1, -EKS2) look only at the custom resource of the older
aws_eks cluster class and report "not applicable" on ours. These two read the cluster's L1 properties:

- EksV2-EKS1 (warning): a public API endpoint open to every address: no PublicAccessCidrs (EKS then
  allows 0.0.0.0/0) or 0.0.0.0/0 among them. CloudFormation's EndpointPublicAccess defaults to true.
- EksV2-EKS2 (error): a control-plane log type off. The EKS User Guide ("Send control plane logs to
  CloudWatch Logs") lists five: api, audit, authenticator, controllerManager, scheduler.
"""

from __future__ import annotations

import jsii
from aws_cdk import CfnResource, Stack
from cdk_nag import IApplyRule, NagMessageLevel, NagPack, NagRuleCompliance

PACK_NAME = "EksV2"
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
_OPEN = ("0.0.0.0/0", "::/0")


def public_endpoint_compliance(vpc_config: dict | None) -> NagRuleCompliance:
    """ResourcesVpcConfig as Stack.resolve gives it (camelCase keys)."""
    config = vpc_config or {}
    if config.get("endpointPublicAccess", True) is False:
        return NagRuleCompliance.NOT_APPLICABLE
    cidrs = config.get("publicAccessCidrs") or []
    if not cidrs or any(cidr in _OPEN for cidr in cidrs):
        return NagRuleCompliance.NON_COMPLIANT
    return NagRuleCompliance.COMPLIANT


def missing_log_types(logging: dict | None) -> list[str]:
    """The control-plane log types that Logging (as Stack.resolve gives it) leaves off."""
    enabled = {entry.get("type") for entry in ((logging or {}).get("clusterLogging") or {}).get("enabledTypes") or []}
    return [kind for kind in CONTROL_PLANE_LOG_TYPES if kind not in enabled]


@jsii.implements(IApplyRule)
class _Rule:
    """One rule applied to one AWS::EKS::Cluster (cdk-nag's IApplyRule, in Python)."""

    def __init__(self, node: CfnResource, suffix: str, level: NagMessageLevel, info: str, explanation: str, check):
        self._node, self._suffix, self._level, self._info, self._explanation, self._check = (
            node, suffix, level, info, explanation, check)

    @property
    def node(self) -> CfnResource:
        return self._node

    @property
    def rule_suffix_override(self) -> str:
        return self._suffix

    @property
    def level(self) -> NagMessageLevel:
        return self._level

    @property
    def info(self) -> str:
        return self._info

    @property
    def explanation(self) -> str:
        return self._explanation

    @property
    def ignore_suppression_condition(self):
        return None

    def rule(self, node: CfnResource) -> NagRuleCompliance:
        return self._check(node)


def _public_endpoint(node) -> NagRuleCompliance:
    return public_endpoint_compliance(Stack.of(node).resolve(node.resources_vpc_config))


def _control_plane_logs(node) -> NagRuleCompliance:
    return NagRuleCompliance.NON_COMPLIANT if missing_log_types(Stack.of(node).resolve(node.logging)) else NagRuleCompliance.COMPLIANT


class EksV2Checks(NagPack):
    """The two rules above, as a cdk-nag pack: `Aspects.of(app).add(EksV2Checks())`."""

    def __init__(self, **props) -> None:
        super().__init__(**props)
        self._pack_name = PACK_NAME

    def visit(self, node) -> None:
        if not (isinstance(node, CfnResource) and node.cfn_resource_type == "AWS::EKS::Cluster"):
            return
        self._apply_rule(_Rule(
            node, "EKS1", NagMessageLevel.WARN,
            "The EKS cluster's public API endpoint accepts every address (no PublicAccessCidrs, or 0.0.0.0/0).",
            "Every request is still authenticated by IAM, but the endpoint is open to scans and to any leaked "
            "credential; set endpoint_public_cidrs to your ranges, or endpoint_access=private.",
            _public_endpoint))
        self._apply_rule(_Rule(
            node, "EKS2", NagMessageLevel.ERROR,
            f"The EKS cluster does not send every control-plane log type ({', '.join(CONTROL_PLANE_LOG_TYPES)}) "
            "to CloudWatch Logs.",
            "Without the audit and authenticator logs, who did what to the cluster cannot be found afterwards.",
            _control_plane_logs))
