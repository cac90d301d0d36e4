"""Will `cdk deploy` of these settings get its GPUs? `python -m tools.preflight [-c key=value ...]`.

Read-only AWS calls with boto3's normal credential chain, against the settings the app would
use (cdk.json's context plus the same `-c` overrides); `--probe` alone writes (capacity reservations
made and cancelled: tools/capacity_checks.py). Each check prints PASS, WARN or FAIL with
one line of reason and the fix; any FAIL exits 1, so `make deploy` stops before CloudFormation
spends twenty minutes finding out.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from cdk_constructs.instance_types import INSTANCE_TYPES, SPOT_VCPU_QUOTAS, VCPU_QUOTAS, vcpu_quota_class
from planning.model_config import CONTEXT_FILE
from stacks.context import cached_lookups
from stacks.lookups import save as save_lookups
from stacks.settings import Settings, SettingsError
from stacks.validation import EKS_CREATABLE_VERSIONS
from tools import capacity_checks as capacity
from tools.cli import parse, tool_parser
from tools.verdicts import FAIL, PASS, WARN, Check

__all__ = ["FAIL", "PASS", "WARN", "Check", "main", "run_checks"]

# EC2 User Guide, "Spot Instance quotas": spot has quotas of its own, in vCPUs of running and requested instances
# (cdk_constructs/instance_types.py SPOT_VCPU_QUOTAS).


# ---------------------------------------------------------------- the checks (one AWS question each)


def check_region(ec2, region: str) -> Check:
    regions = {r["RegionName"]: r.get("OptInStatus", "opt-in-not-required")
               for r in ec2.describe_regions(AllRegions=True)["Regions"]}
    status = regions.get(region)
    if status is None:
        return Check("region", FAIL, f"{region} is not an AWS region this account knows",
                     "set -c region=<one of: " + ", ".join(sorted(regions)[:6]) + ", ...>")
    if status == "not-opted-in":
        return Check("region", FAIL, f"{region} is an opt-in region that this account has not enabled",
                     f"aws account enable-region --region-name {region}")
    return Check("region", PASS, f"{region} is enabled ({status})")


def check_kubernetes_version(eks, version: str) -> Check:
    """Ask EKS which versions it creates now; fall back to the project's table if the API is unavailable."""
    try:
        listed = eks.describe_cluster_versions(clusterVersions=[version]).get("clusterVersions", [])
    except Exception as error:  # older endpoints, missing permission, or a mock without the API
        known = version in EKS_CREATABLE_VERSIONS
        return Check("kubernetes version", PASS if known else FAIL,
                     f"{version} is {'in' if known else 'not in'} the project's creatable list "
                     f"(EKS not asked: {type(error).__name__})",
                     "" if known else f"set -c kubernetes_version=<{', '.join(EKS_CREATABLE_VERSIONS)}>")
    if not listed:
        return Check("kubernetes version", FAIL, f"EKS does not offer Kubernetes {version} in this region",
                     f"set -c kubernetes_version=<{', '.join(EKS_CREATABLE_VERSIONS)}>")
    status = listed[0].get("versionStatus") or listed[0].get("status") or "available"
    if str(status).upper() in ("UNSUPPORTED", "END_OF_SUPPORT"):
        newer = [v for v in EKS_CREATABLE_VERSIONS if v != version]
        return Check("kubernetes version", FAIL, f"Kubernetes {version} is {status} on EKS",
                     f"set -c kubernetes_version={newer[-1]}")
    return Check("kubernetes version", PASS, f"EKS creates Kubernetes {version} ({status})")


def check_offered(ec2, instance_type: str, zone: str) -> Check:
    offerings = ec2.describe_instance_type_offerings(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}]
    )["InstanceTypeOfferings"]
    zones = sorted({o["Location"] for o in offerings})
    if zone in zones:
        return Check("offered in AZ", PASS, f"{instance_type} is offered in {zone}")
    if not zones:
        return Check("offered in AZ", FAIL, f"{instance_type} is not offered in any AZ of this region",
                     "choose another region (-c region=...) or -c gpu_instance_type=...")
    return Check("offered in AZ", FAIL, f"{instance_type} is not offered in {zone}; it is in {', '.join(zones)}",
                 f"-c gpu_availability_zone={zones[0]} (and list it in availability_zones)")


def check_efa(ec2, instance_type: str) -> Check:
    info = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
    network = info.get("NetworkInfo", {})
    interfaces = network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0) if network.get("EfaSupported") else 0
    expected = INSTANCE_TYPES[instance_type].efa_interfaces if instance_type in INSTANCE_TYPES else None
    if not interfaces:
        return Check("EFA support", FAIL, f"{instance_type} does not support EFA",
                     "-c gpu_instance_type=<an EFA type: g6.12xlarge, p5.48xlarge, ...>")
    if expected is not None and expected != interfaces:
        return Check("EFA support", WARN,
                     f"EC2 says {instance_type} takes {interfaces} EFA interfaces, the project's table says {expected}",
                     "correct cdk_constructs/instance_types.py (the launch template uses the table)")
    agreement = "as the table says" if expected is not None else "a type the project's table does not list"
    return Check("EFA support", PASS, f"{instance_type} supports EFA with {interfaces} interface(s), {agreement}")


def _vcpus_in_use(ec2, quota_class: str, spot: bool = False) -> int:
    """vCPUs of the pending and running instances of a quota class: the spot ones, or the others."""
    counts: dict[str, int] = {}
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                kind = instance["InstanceType"]
                if vcpu_quota_class(kind, spot) == quota_class and (instance.get("InstanceLifecycle") == "spot") == spot:
                    counts[kind] = counts.get(kind, 0) + 1
    if not counts:
        return 0
    unknown = [k for k in counts if k not in INSTANCE_TYPES]
    vcpus = {k: INSTANCE_TYPES[k].vcpus for k in counts if k in INSTANCE_TYPES}
    if unknown:
        for info in ec2.describe_instance_types(InstanceTypes=unknown)["InstanceTypes"]:
            vcpus[info["InstanceType"]] = info["VCpuInfo"]["DefaultVCpus"]
    return sum(vcpus[k] * n for k, n in counts.items())


def _quota_value(quotas, code: str) -> int:
    """The account's applied quota, or AWS's default where the account has never had it changed."""
    try:
        return int(quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except quotas.exceptions.NoSuchResourceException:
        return int(quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])


def check_vcpu_quota(quotas, ec2, instance_type: str, count: int, region: str, role: str,
                     market: str = "on-demand") -> Check:
    name = f"vCPU quota ({role})"
    spot = market == "spot"
    quota_class = vcpu_quota_class(instance_type, spot)
    if market == "capacity-block":
        return Check(name, PASS, f"{count} x {instance_type} come from the Capacity Block, bought with its own limits; "
                     "the On-Demand vCPU quota is not checked")
    if quota_class is None:
        return Check(name, WARN, f"{instance_type} counts against a quota this check does not know",
                     "check it in the Service Quotas console")
    code, quota = (SPOT_VCPU_QUOTAS if spot else VCPU_QUOTAS)[quota_class]
    need = INSTANCE_TYPES[instance_type].vcpus * count
    limit = _quota_value(quotas, code)
    used = _vcpus_in_use(ec2, quota_class, spot)
    what = f"{count} x {instance_type} need {need} vCPU; quota '{quota}' ({code}) is {limit}, {used} in use"
    if limit - used >= need:
        return Check(name, PASS, what)
    desired = int(math.ceil((used + need) / 4) * 4)
    return Check(name, FAIL, what + f", {limit - used} free",
                 f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
                 f"--desired-value {desired} --region {region}")


def check_capacity_reservation(ec2, s: Settings) -> list[Check]:
    name = "capacity reservation"
    if s.capacity_reservation_id is None:
        return [Check(name, PASS, "none configured (On-Demand capacity)")]
    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[s.capacity_reservation_id])["CapacityReservations"]
    except Exception as error:
        code = getattr(error, "response", {}).get("Error", {}).get("Code", type(error).__name__)
        return [Check(name, FAIL, f"{s.capacity_reservation_id} cannot be read: {code}",
                      "check the id and region, or set -c capacity_reservation_id=null")]
    if not found:
        return [Check(name, FAIL, f"{s.capacity_reservation_id} does not exist in {s.region}",
                      "check the id and region, or set -c capacity_reservation_id=null")]
    cr = found[0]
    if cr.get("ReservationType") == "capacity-block":  # launched only with MarketType capacity-block
        return [Check(name, FAIL, f"{s.capacity_reservation_id} is a Capacity Block, which on-demand nodes cannot use",
                      "-c gpu_capacity_type=capacity-block")]
    problems = []
    if cr.get("State") != "active":
        problems.append(f"its state is {cr.get('State')}, not active")
    problems += capacity.placement_mismatches(cr, s)
    available = cr.get("AvailableInstanceCount", 0)
    if available < s.gpu_node_count:
        problems.append(f"{available} instance(s) available, {s.gpu_node_count} needed")
    checks = []
    if problems:
        fix = (f"-c gpu_instance_type={cr.get('InstanceType')} -c gpu_availability_zone={cr.get('AvailabilityZone')}"
               if cr.get("State") == "active" else "use an active reservation")
        checks.append(Check(name, FAIL, f"{s.capacity_reservation_id}: " + "; ".join(problems), fix))
    else:
        checks.append(Check(name, PASS, f"{s.capacity_reservation_id} is active: {available} x {s.gpu_instance_type} "
                                        f"available in {s.gpu_availability_zone}"))
    return checks


def stack_log_group_names(cluster_name: str) -> list[str]:
    """The log groups the stack creates under fixed names: EKS's control-plane group and the
    observability add-on's (the cluster takes the stack's name)."""
    from cdk_constructs.observability import log_group_names

    return [f"/aws/eks/{cluster_name}/cluster", *log_group_names(cluster_name)]


# The stack states from which `cdk deploy` creates every resource anew, none of the stack's own left
# (aws-cdk CLI 2.1148: a stack in ROLLBACK_COMPLETE failed its creation and is deleted and re-created,
# StackStatus.isCreationFailure; one in REVIEW_IN_PROGRESS holds no resource and counts as absent): a
# leftover group fails that create as it fails a first one.
STACK_STATUSES_CREATED_AFRESH = frozenset({"DELETE_COMPLETE", "ROLLBACK_COMPLETE", "REVIEW_IN_PROGRESS"})


def check_leftover_log_groups(logs, cloudformation, s: Settings) -> Check:
    """A log group of a fixed name that outlived its stack makes CloudFormation's create of it fail
    (AlreadyExists) and roll back the first deploy; one left by a destroyed stack's Fluent Bit may even
    lack the retention and key. The stack's own groups, while it exists, are no leftover."""
    from botocore.exceptions import ClientError

    try:
        stacks = cloudformation.describe_stacks(StackName=s.stack_name)["Stacks"]
        if any(stack["StackStatus"] not in STACK_STATUSES_CREATED_AFRESH for stack in stacks):
            return Check("leftover log groups", PASS, f"stack {s.stack_name} exists: its log groups are its own")
    except ClientError as error:
        if "does not exist" not in str(error):
            raise
    names = stack_log_group_names(s.eks_cluster_name)
    found = [g["logGroupName"] for name in names
             for g in logs.describe_log_groups(logGroupNamePrefix=name)["logGroups"] if g["logGroupName"] == name]
    if not found:
        return Check("leftover log groups", PASS, f"none of the stack's {len(names)} log groups exists yet")
    commands = "; ".join(f"aws logs delete-log-group --log-group-name {name} --region {s.region}" for name in found)
    return Check("leftover log groups", FAIL,
                 f"{', '.join(found)} left by an earlier stack {s.stack_name}: the deploy would fail creating it",
                 f"read what you need from it, then {commands}")


def check_pull_through_cache_rule(ecr, cloudformation, s: Settings) -> Check:
    """A registry holds one pull-through cache rule per repository prefix: CreatePullThroughCacheRule with a
    prefix already taken fails (PullThroughCacheRuleAlreadyExistsException, Amazon ECR API Reference), and
    with it the first deploy. `ecr-public` is also the prefix the ECR console proposes for ECR Public, so an
    account may well hold one already. The rule of this very stack is no conflict."""
    from botocore.exceptions import ClientError

    from cdk_constructs.image_cache import CACHE_PREFIX

    name = "pull-through cache rule"
    if not s.image_pull_through_cache:
        return Check(name, PASS, "image_pull_through_cache is off: the stack creates no rule")
    try:
        rules = ecr.describe_pull_through_cache_rules(ecrRepositoryPrefixes=[CACHE_PREFIX])["pullThroughCacheRules"]
    except ClientError as error:
        if error.response["Error"]["Code"] != "PullThroughCacheRuleNotFoundException":
            raise
        rules = []
    if not rules:
        return Check(name, PASS, f"no rule of prefix {CACHE_PREFIX} yet")
    try:
        resources = cloudformation.describe_stack_resources(StackName=s.stack_name)["StackResources"]
        stack = cloudformation.describe_stacks(StackName=s.stack_name)["Stacks"][0]
    except ClientError as error:
        if "does not exist" not in str(error):
            raise
        resources, stack = [], {"StackStatus": "DELETE_COMPLETE"}
    if stack["StackStatus"] not in STACK_STATUSES_CREATED_AFRESH and any(
            r["ResourceType"] == "AWS::ECR::PullThroughCacheRule" for r in resources):
        return Check(name, PASS, f"the rule of prefix {CACHE_PREFIX} is stack {s.stack_name}'s own")
    upstream = rules[0].get("upstreamRegistryUrl", "?")
    return Check(name, FAIL,
                 f"a rule of prefix {CACHE_PREFIX} (upstream {upstream}) already exists in {s.region}: the deploy "
                 "would fail creating the stack's own",
                 f"set -c image_pull_through_cache=false (pulls through the NAT), or delete it: aws ecr "
                 f"delete-pull-through-cache-rule --ecr-repository-prefix {CACHE_PREFIX} --region {s.region}")


# ---------------------------------------------------------------- running and reporting


def run_checks(session, s: Settings, probe: bool = False, cache: dict | None = None, context: dict | None = None,
               refresh: bool = False) -> list[Check]:
    """Every check, in order. What the capacity checks look up goes into `cache` (new cdk.context.json entries);
    `context` is what cdk.context.json holds already (its zones kept unless `refresh`: capacity_checks.check_zones)."""
    from stacks.lookups import AUTO_ZONE, resolve_gpu_zone

    cache = {} if cache is None else cache
    context = context or {}
    ec2 = session.client("ec2", region_name=s.region)
    eks = session.client("eks", region_name=s.region)
    quotas = session.client("service-quotas", region_name=s.region)
    [region] = _guarded("region", lambda: check_region(ec2, s.region))
    if region.verdict == FAIL:
        return [region]
    checks = [
        region,
        *_guarded("kubernetes version", lambda: check_kubernetes_version(eks, s.kubernetes_version)),
        *_guarded("capacity type", lambda: capacity.check_capacity_type(ec2, s, cache)),
        *_guarded("zones", lambda: capacity.check_zones(ec2, s, cache, probe, context=context, refresh=refresh)),
    ]
    if s.gpu_availability_zone == AUTO_ZONE:
        try:
            s = resolve_gpu_zone(s, {**context, **cache})
        except SettingsError as error:
            return checks + [Check("gpu zone", FAIL, str(error), "see the zones line")]
        checks.append(Check("gpu zone", PASS, f"auto is {s.gpu_availability_zone}"))
    if s.gpu_capacity_type == "capacity-block":
        reservation = lambda: capacity.check_capacity_block(ec2, s, capacity.predicted_job_s(s))  # noqa: E731
    else:
        reservation = lambda: check_capacity_reservation(ec2, s)  # noqa: E731
    return checks + [
        *_guarded("offered in AZ", lambda: check_offered(ec2, s.gpu_instance_type, s.gpu_availability_zone)),
        *_guarded("EFA support", lambda: check_efa(ec2, s.gpu_instance_type)),
        *_guarded("vCPU quota (GPU nodes)", lambda: check_vcpu_quota(
            quotas, ec2, s.gpu_instance_type, s.gpu_node_count, s.region, "GPU nodes", s.gpu_capacity_type)),
        *_guarded("vCPU quota (system nodes)", lambda: check_vcpu_quota(
            quotas, ec2, s.system_instance_type, s.system_node_count, s.region, "system nodes")),
        *_guarded("capacity reservation", reservation),
        *([capacity.spot_price_check(s, cache)] if s.gpu_capacity_type == "spot" else []),
        *_guarded("leftover log groups", lambda: check_leftover_log_groups(
            session.client("logs", region_name=s.region), session.client("cloudformation", region_name=s.region), s)),
        *_guarded("pull-through cache rule", lambda: check_pull_through_cache_rule(
            session.client("ecr", region_name=s.region), session.client("cloudformation", region_name=s.region), s)),
    ]


def _guarded(name: str, check) -> list[Check]:
    """Run a check (one Check or a list); an AWS call refused (permissions, throttling) is a FAIL naming it."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        result = check()
    except (ClientError, BotoCoreError) as error:
        code = getattr(error, "response", {}).get("Error", {}).get("Code") or type(error).__name__
        operation = getattr(error, "operation_name", "an AWS call")
        fix = PROBE_FIX if operation in PROBE_OPERATIONS else READ_FIX
        return [Check(name, FAIL, f"could not check: {operation} failed with {code}", fix)]
    return result if isinstance(result, list) else [result]


READ_FIX = ("grant the caller read access to EC2, EKS, Service Quotas, CloudFormation, CloudWatch Logs and ECR "
            "(e.g. ReadOnlyAccess)")
# The probe's writes (tools/capacity_checks.py probe_zones): no read-only policy grants them.
PROBE_OPERATIONS = frozenset({"CreateCapacityReservation", "CancelCapacityReservation", "CreateTags"})
PROBE_FIX = ("PROBE=1 writes: grant ec2:CreateCapacityReservation, ec2:CancelCapacityReservation and ec2:CreateTags "
             "(ReadOnlyAccess has none of them), or run preflight without PROBE=1")


def format_table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.verdict}  {c.name:<{width}}  {c.reason}")
        if c.fix and c.verdict != PASS:
            lines.append(f"{'':6}{'':<{width}}  fix: {c.fix}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser("python -m tools.preflight", __doc__)
    parser.add_argument("--probe", action="store_true",
                        help="probe on-demand capacity in every zone that offers the GPU type: a capacity reservation "
                             "of gpu_node_count instances made and cancelled at once per zone (billed per second "
                             "while it exists; needs ec2:CreateCapacityReservation, CancelCapacityReservation, "
                             "CreateTags)")
    parser.add_argument("--refresh", action="store_true",
                        help="rank the GPU zones again and replace the cached ranking that gpu_availability_zone=auto "
                             "reads (a zone that moves replaces the GPU node group)")
    args, _, settings = parse(parser, argv, resolve_lookups=False)
    if settings is None:
        return 2
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    session = boto3.Session()
    try:
        identity = session.client("sts", region_name=settings.region).get_caller_identity()
    except NoCredentialsError:
        print("error: no AWS credentials found (boto3 looked in the environment, ~/.aws and the instance role); "
              "run `aws configure` or `aws sso login` first", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as error:
        print(f"error: AWS credentials were refused: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"preflight for stack {settings.stack_name} in {settings.region}, account {identity['Account']}")
    cache: dict = {}
    context_file = Path(args.cdk_json).resolve().parent / CONTEXT_FILE
    try:
        checks = run_checks(session, settings, args.probe, cache, cached_lookups(context_file), args.refresh)
    except KeyboardInterrupt:  # the probe has cancelled what it made (tools/capacity_checks.py probe_zones)
        print("preflight stopped (Ctrl-C); the probe cancelled the reservations it made (one it could not is named "
              "above)", file=sys.stderr)
        return 130
    finally:  # what was looked up is kept, also when it stopped
        save_lookups(cache, context_file)
    print(format_table(checks))
    if cache:
        print(f"cached in {CONTEXT_FILE} for synth: {', '.join(sorted(cache))}")
    failed = [c for c in checks if c.verdict == FAIL]
    print(f"{len(failed)} FAIL, {sum(c.verdict == WARN for c in checks)} WARN, {sum(c.verdict == PASS for c in checks)} PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
