"""ECR's side of the seam: the images the stack's pods pull from this account's private registry, and the
pull-through cache rules that must serve them.

Amazon ECR User Guide and API Reference:
- a rule's `EcrRepositoryPrefix` is a prefix of repository names ("There is always an assumed / applied to the
  end of the prefix", CreatePullThroughCacheRule); `UpstreamRegistryUrl` names the upstream registry (ECR Public
  public.ecr.aws, Docker Hub registry-1.docker.io, Quay quay.io, Kubernetes registry.k8s.io, ...);
- "Pulling an image with a pull through cache rule": `<account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<path>:<tag>`
  is `<upstream>/<path>:<tag>`;
- "IAM permissions required to sync an upstream registry with an Amazon ECR private registry": besides the
  pull rights, the puller needs `ecr:BatchImportUpstreamImage` ("retrieve the external image and import it to
  your private registry": an identity policy, the registry's permissions policy or a repository policy) and
  `ecr:CreateRepository` ("required if the repository storing the cached images doesn't already exist": an
  identity policy or the registry's permissions policy). The stack creates no repository: the first pull does.
A pull from this registry that no rule covers asks for a repository nobody creates, and the pod waits in
ImagePullBackOff; so does one whose rule fetches from another registry than the image's source.

Which images: every string of the stack's Kubernetes objects, Helm chart values and add-on configuration
values that starts with an ECR registry host of this account (a chart's `image.repository` is one).
A job's source image is its eks-fsdp-efa/image-source annotation (what the pods' images stand for).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from cdk_constructs.annotations import IMAGE_SOURCE_ANNOTATION
from tools.seams import kube
from tools.seams.cfn import ACCOUNT, PARTITION, URL_SUFFIX, Resolver, SeamError
from tools.seams.iam import Policy, Request
from tools.seams.workloads import Call, logical_id_of_arn, of_type, role_arn, role_policies

_ACCOUNT_REGISTRY = re.compile(rf"{ACCOUNT}\.dkr\.ecr\.([a-z0-9-]+)\.{re.escape(URL_SUFFIX)}/(.+)")
IMPORT_ACTIONS = ("ecr:BatchImportUpstreamImage", "ecr:CreateRepository")
_MODELLED_RULE_PROPERTIES = {"EcrRepositoryPrefix", "UpstreamRegistryUrl", "UpstreamRegistry", "CredentialArn"}


@dataclass(frozen=True)
class Rule:
    logical_id: str
    prefix: str
    upstream: str


@dataclass(frozen=True)
class Pull:
    where: str
    """The object, chart or add-on that names the image."""
    image: str
    source: str | None = None
    """The upstream image it stands for, where the object says (IMAGE_SOURCE_ANNOTATION)."""

    @property
    def region(self) -> str:
        return _ACCOUNT_REGISTRY.fullmatch(self.image).group(1)

    @property
    def path(self) -> str:
        """Repository and tag or digest, after the registry host."""
        return _ACCOUNT_REGISTRY.fullmatch(self.image).group(2)

    @property
    def repository(self) -> str:
        name = self.path.split("@")[0]
        last = name.rsplit("/", 1)[-1]
        return name.rsplit(":", 1)[0] if ":" in last else name


def rules(r: Resolver) -> list[Rule]:
    found = []
    for lid in of_type(r, "AWS::ECR::PullThroughCacheRule"):
        props = r.properties(lid)
        unknown = set(props) - _MODELLED_RULE_PROPERTIES
        if unknown or props.get("EcrRepositoryPrefix") == "ROOT":
            raise SeamError(f"{lid}: pull-through cache rule with {sorted(unknown) or 'prefix ROOT'} is not modelled "
                            "in tools/seams/registry.py")
        found.append(Rule(lid, props["EcrRepositoryPrefix"].rstrip("/"), props["UpstreamRegistryUrl"]))
    return found


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _account_images(where: str, value, source: str | None = None) -> list[Pull]:
    return [Pull(where, text, source) for text in sorted(set(_strings(value))) if _ACCOUNT_REGISTRY.fullmatch(text)]


def _json(lid: str, text: str | None):
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        raise SeamError(f"{lid}: values that are not JSON are not modelled") from None


def pulls(r: Resolver) -> list[Pull]:
    """Every image of this account's registries that the template makes a pod pull."""
    found = []
    for lid, obj, _ in kube.manifests(r):
        meta = obj.get("metadata") or {}
        source = (meta.get("annotations") or {}).get(IMAGE_SOURCE_ANNOTATION)
        found += _account_images(f"{obj.get('kind')} {meta.get('namespace', 'default')}/{meta.get('name')} ({lid})",
                                 obj.get("spec"), source)
    for lid in of_type(r, "Custom::AWSCDK-EKS-HelmChart"):
        props = r.properties(lid)
        found += _account_images(f"Helm chart {props.get('Chart')} values ({lid})", _json(lid, props.get("Values")))
    for lid in of_type(r, "AWS::EKS::Addon"):
        props = r.properties(lid)
        found += _account_images(f"add-on {props.get('AddonName')} configuration ({lid})",
                                 _json(lid, props.get("ConfigurationValues")))
    return found


def rule_of(pull: Pull, found: list[Rule]) -> Rule | None:
    """The rule whose prefix (plus its implied /) begins the repository's name; the longest wins."""
    matching = [rule for rule in found if pull.repository.startswith(rule.prefix + "/")]
    return max(matching, key=lambda rule: len(rule.prefix), default=None)


def problems(r: Resolver) -> list[str]:
    found, cache_rules = [], rules(r)
    listed = ", ".join(f"{rule.prefix}/ -> {rule.upstream}" for rule in cache_rules) or "none"
    for pull in pulls(r):
        if pull.region != r.region:
            found.append(f"ECR: {pull.where} pulls {pull.image}: a registry in {pull.region}, where this stack "
                         f"(in {r.region}) creates no pull-through cache rule")
            continue
        rule = rule_of(pull, cache_rules)
        if rule is None:
            found.append(f"ECR: {pull.where} pulls {pull.image}: no pull-through cache rule's prefix begins repository "
                         f"{pull.repository} (rules: {listed}), so nothing creates it and the pull fails")
            continue
        if pull.source is None:
            continue
        upstream = f"{rule.upstream}/{pull.path.removeprefix(rule.prefix + '/')}"
        if upstream != pull.source:
            found.append(f"ECR: {pull.where} pulls {pull.image}, which rule {rule.logical_id} fetches from {upstream}, "
                         f"not the image's source {pull.source} (\"Pulling an image with a pull through cache rule\")")
    return found


def _registry_policies(r: Resolver) -> tuple[Policy, ...]:
    return tuple(Policy(f"{lid} (registry policy)", r.properties(lid)["PolicyText"], resource_based=True)
                 for lid in of_type(r, "AWS::ECR::RegistryPolicy"))


def import_calls(r: Resolver) -> list[Call]:
    """Each node's first pull of every cached image: ECR imports it as the puller and creates its repository."""
    cache_rules, calls = rules(r), []
    cached = [p for p in pulls(r) if p.region == r.region and rule_of(p, cache_rules)]
    for lid in of_type(r, "AWS::EKS::Nodegroup"):
        role_id = logical_id_of_arn(r.resources[lid]["Properties"]["NodeRole"])
        principal, policies = role_arn(r, role_id), role_policies(r, role_id) + _registry_policies(r)
        for pull in cached:
            repository = f"arn:{PARTITION}:ecr:{r.region}:{ACCOUNT}:repository/{pull.repository}"
            calls += [Call(f"node group {lid}", f"ECR pull-through cache, first pull of {pull.image} (ECR User Guide, "
                                                 "\"IAM permissions required to sync an upstream registry\")",
                           Request(principal, action, repository), policies) for action in IMPORT_ACTIONS]
    return calls
