"""`make destroy`: `cdk destroy`, then list what was kept on purpose, so nothing bills unseen.

Before destroying, it reads which of the stack's resources CloudFormation will retain
(DeletionPolicy Retain: the checkpoint bucket, the secrets KMS key). Afterwards it reports each of
them, every log group left under the stack's EKS and Lambda prefixes, and the repositories its
pull-through cache rule created, each with its size and the command that deletes it. It deletes
nothing that holds data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.cli import parse, tool_parser

RETAINING_POLICIES = ("Retain", "RetainExceptOnCreate")


@dataclass
class Kept:
    kind: str
    name: str
    detail: str
    delete_with: str


def retained_logical_ids(template: dict) -> dict[str, str]:
    """Logical id -> resource type of every resource that `cdk destroy` leaves behind."""
    return {logical_id: resource["Type"] for logical_id, resource in template.get("Resources", {}).items()
            if resource.get("DeletionPolicy") in RETAINING_POLICIES}


def describe_bucket(s3, bucket: str) -> Kept | None:
    try:
        s3.head_bucket(Bucket=bucket)
    except s3.exceptions.ClientError:
        return None
    count = size = 0
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            count += 1
            size += version["Size"]
    return Kept("S3 bucket", bucket, f"{count} object version(s), {size / 2**30:.2f} GiB (checkpoints, run summaries)",
                f"empty it (S3 console: Empty, which removes every version), then aws s3api delete-bucket --bucket {bucket}")


def describe_key(kms, key_id: str) -> Kept | None:
    try:
        state = kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"]
    except kms.exceptions.ClientError:
        return None
    if state in ("PendingDeletion", "PendingReplicaDeletion"):
        return None
    return Kept("KMS key", key_id, f"{state}; about $1/month while it exists (it encrypted the cluster's secrets)",
                f"aws kms schedule-key-deletion --key-id {key_id} --pending-window-in-days 7")


def leftover_log_groups(logs, prefixes: list[str]) -> list[Kept]:
    """Log groups under these prefixes that still exist. The stack's own groups go with it; these
    are what something wrote outside it (a Lambda run before it had its group, EKS before its group)."""
    kept = []
    for prefix in prefixes:
        for page in logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix):
            for group in page.get("logGroups", []):
                retention = f"expires after {group['retentionInDays']} days" if group.get("retentionInDays") else "never expires"
                kept.append(Kept("log group", group["logGroupName"],
                                 f"{group.get('storedBytes', 0) / 2**20:.1f} MiB, {retention}",
                                 f"aws logs delete-log-group --log-group-name {group['logGroupName']}"))
    return kept


def cached_repositories(ecr, prefix: str) -> list[Kept]:
    """The repositories a pull-through cache rule made at the first pulls (ECR User Guide, "Pulling an image
    with a pull through cache rule": the repository is created then, outside CloudFormation). Deleting the
    rule with the stack leaves them, and their images bill storage ($0.10/GB-month) until deleted."""
    kept = []
    for page in ecr.get_paginator("describe_repositories").paginate():
        for repository in page.get("repositories", []):
            name = repository["repositoryName"]
            if not name.startswith(prefix + "/"):
                continue
            size = sum(image.get("imageSizeInBytes", 0)
                       for images in ecr.get_paginator("describe_images").paginate(repositoryName=name)
                       for image in images.get("imageDetails", []))
            kept.append(Kept("ECR repository", name, f"{size / 2**30:.2f} GiB of cached images (pull-through cache)",
                             f"aws ecr delete-repository --repository-name {name} --force"))
    return kept


def log_group_prefixes(stack_name: str, cluster_name: str) -> list[str]:
    """Where this stack's logs can be: EKS's control-plane group, its Lambdas' default groups, and the
    containers' logs and Container Insights (which Fluent Bit and the agent recreate if they outlive theirs)."""
    return [f"/aws/eks/{cluster_name}/", f"/aws/lambda/{stack_name}-", f"/aws/containerinsights/{cluster_name}/"]


def kept_report(kept: list[Kept]) -> str:
    if not kept:
        return "nothing was kept: no retained resource of this stack is left"
    lines = ["kept on purpose (still billed until you delete it):"]
    for item in kept:
        lines += [f"  {item.kind} {item.name}: {item.detail}", f"    delete: {item.delete_with}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser("python -m tools.teardown", __doc__)
    parser.add_argument("--cdk", default="cdk", help="the CDK CLI to run")
    # whatever gpu_availability_zone auto stood for, destroy needs only the stack's name and region
    args, cdk_args, s = parse(parser, argv, resolve_lookups=False)
    if s is None:
        return 2
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    session = boto3.Session(region_name=s.region)
    cloudformation = session.client("cloudformation")
    try:
        template = cloudformation.get_template(StackName=s.stack_name, TemplateStage="Processed")["TemplateBody"]
        template = json.loads(template) if isinstance(template, str) else template
        resources = cloudformation.describe_stack_resources(StackName=s.stack_name)["StackResources"]
        outputs = {o["OutputKey"]: o["OutputValue"]
                   for o in cloudformation.describe_stacks(StackName=s.stack_name)["Stacks"][0].get("Outputs", [])}
    except NoCredentialsError:
        print("error: no AWS credentials found; run `aws configure` or `aws sso login` first", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as error:
        print(f"error: cannot read stack {s.stack_name} in {s.region}: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    retained = retained_logical_ids(template)
    physical = {r["LogicalResourceId"]: r.get("PhysicalResourceId") for r in resources}
    context_args = [arg for item in args.context for arg in ("-c", item)]
    done = subprocess.run([args.cdk, "destroy", s.stack_name, *context_args, *cdk_args], cwd=Path(args.cdk_json).parent)
    if done.returncode != 0:
        print(f"error: cdk destroy exited {done.returncode}; the stack may still exist", file=sys.stderr)
        return done.returncode
    try:
        cloudformation.describe_stacks(StackName=s.stack_name)
        print(f"stack {s.stack_name} still exists (destroy cancelled?): nothing was deleted", file=sys.stderr)
        return 1
    except ClientError:
        pass  # gone, as it should be
    kept: list[Kept | None] = []
    for logical_id, kind in retained.items():
        name = physical.get(logical_id)
        if not name:
            continue
        if kind == "AWS::S3::Bucket":
            kept.append(describe_bucket(session.client("s3"), name))
        elif kind == "AWS::KMS::Key":
            kept.append(describe_key(session.client("kms"), name))
        else:
            kept.append(Kept(kind, name, "retained by its DeletionPolicy", "delete it in its service's console"))
    if any(r["ResourceType"] == "AWS::ECR::PullThroughCacheRule" for r in resources):
        from cdk_constructs.image_cache import CACHE_PREFIX

        kept += cached_repositories(session.client("ecr"), CACHE_PREFIX)
    cluster_name = outputs.get("ClusterName", s.eks_cluster_name)
    kept += leftover_log_groups(session.client("logs"), log_group_prefixes(s.stack_name, cluster_name))
    print(kept_report([k for k in kept if k]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
