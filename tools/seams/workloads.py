"""The AWS calls each workload of the stack makes, from the workload's own source, and their verdict
under the synthesized policies (tools.seams.iam over the template resolved by tools.seams.cfn).

A call names the action, the resource's ARN and the request context the owning service supplies (the
tags it puts on the resource, the transport), so a condition on a value that never occurs shows up
as a denial, naming workload, call and the statement that failed to match.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.seams.cfn import ACCOUNT, PARTITION, Resolver, SeamError
from tools.seams.iam import Decision, Policy, Request, closest_statements, evaluate
from tools.seams.managed_policies import MANAGED_POLICIES
from tools.seams.node import launch_template_of

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"

# The namespace each EKS add-on installs its service accounts in (each add-on's page in the EKS User Guide).
ADDON_NAMESPACES = {"vpc-cni": "kube-system", "amazon-cloudwatch-observability": "amazon-cloudwatch",
                    "eks-pod-identity-agent": "kube-system"}

# Cluster Autoscaler 1.36.1, cluster-autoscaler/cloudprovider/aws/README.md lines 34-69, "Full Cluster
# Autoscaler Features Policy (Recommended)": its first block (reads, no resource-level permissions)...
AUTOSCALER_READS = (
    "autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities", "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplateVersions", "ec2:GetInstanceTypesFromInstanceRequirements",
)
# ...eks:DescribeNodegroup (same block; aws_wrapper.go getManagedNodegroupInfo calls it per managed group,
# to build a template node from zero: aws_manager.go buildNodeFromTemplate), and the second block's writes
# (auto_scaling_groups.go: SetDesiredCapacity to scale up, TerminateInstanceInAutoScalingGroup to scale down).
AUTOSCALER_DESCRIBE_NODEGROUP = "eks:DescribeNodegroup"
AUTOSCALER_WRITES = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")
AUTOSCALER_LAUNCH_TEMPLATE_READ = "ec2:DescribeLaunchTemplateVersions"


@dataclass(frozen=True)
class Call:
    workload: str
    source: str
    """Where the call comes from in the workload's source or documentation."""
    request: Request
    policies: tuple[Policy, ...]


@dataclass(frozen=True)
class Denial:
    call: Call
    decision: Decision
    near_misses: tuple[str, ...]

    def line(self) -> str:
        r = self.call.request
        text = f"IAM: {self.call.workload} calls {r.action} on {r.resource}: {self.decision.reason} ({self.call.source})"
        if self.near_misses:
            text += "; the Allow that names it does not match: " + "; ".join(self.near_misses)
        return text


# ---------------------------------------------------------------------- roles and their policies


def logical_id_of_arn(value) -> str:
    """The logical ID behind {"Fn::GetAtt": [<id>, "Arn"]} in the raw template."""
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        return (target.split(".")[0] if isinstance(target, str) else target[0])
    raise SeamError(f"expected a Fn::GetAtt of a role's Arn, found {value!r}")


def role_policies(r: Resolver, role_id: str) -> tuple[Policy, ...]:
    """Every identity policy of a role: inline, attached AWS::IAM::Policy, AWS managed."""
    props = r.properties(role_id)
    name = r.ref(role_id)
    found = [Policy(f"{role_id} inline {p['PolicyName']}", p["PolicyDocument"]) for p in props.get("Policies", [])]
    for lid, resource in r.resources.items():
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            policy = r.properties(lid)
            if name in policy.get("Roles", []):
                found.append(Policy(lid, policy["PolicyDocument"]))
    for arn in props.get("ManagedPolicyArns", []):
        if not arn.startswith(f"arn:{PARTITION}:iam::aws:policy/"):
            raise SeamError(f"{role_id}: customer managed policy {arn} is not modelled")
        short = arn.rsplit("/", 1)[1]
        if short not in MANAGED_POLICIES:
            raise SeamError(f"{role_id}: AWS managed policy {short} is not in tools/seams/managed_policies.py")
        document = MANAGED_POLICIES[short]
        if document is None:
            raise SeamError(f"{role_id}: a call is judged against {short}, which the harness does not model")
        found.append(Policy(f"{role_id} managed {short}", document))
    return tuple(found)


def role_arn(r: Resolver, role_id: str) -> str:
    return r.get_att(role_id, "Arn")


def trust_policy(r: Resolver, role_id: str) -> Policy:
    return Policy(f"{role_id} trust policy", r.properties(role_id)["AssumeRolePolicyDocument"], resource_based=True)


def pod_identity_roles(r: Resolver) -> dict[tuple[str, str], str]:
    """(namespace, service account) -> role logical ID, from the associations and the add-ons' own."""
    roles = {}
    for lid, resource in r.resources.items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::EKS::PodIdentityAssociation":
            roles[(props["Namespace"], props["ServiceAccount"])] = logical_id_of_arn(props["RoleArn"])
        if resource["Type"] == "AWS::EKS::Addon" and props.get("PodIdentityAssociations"):
            if props["AddonName"] not in ADDON_NAMESPACES:
                raise SeamError(f"{lid}: the namespace of add-on {props['AddonName']} is not in ADDON_NAMESPACES")
            for association in props["PodIdentityAssociations"]:
                roles[(ADDON_NAMESPACES[props["AddonName"]], association["ServiceAccount"])] = \
                    logical_id_of_arn(association["RoleArn"])
    return roles


def of_type(r: Resolver, kind: str) -> list[str]:
    return [lid for lid, res in r.resources.items() if res["Type"] == kind]


def cluster_name(r: Resolver) -> str:
    [cluster] = of_type(r, "AWS::EKS::Cluster")
    return r.ref(cluster)


def cluster_arn(r: Resolver) -> str:
    [cluster] = of_type(r, "AWS::EKS::Cluster")
    return r.get_att(cluster, "Arn")


def _as(r: Resolver, workload: str, namespace: str, service_account: str) -> tuple[str, tuple[Policy, ...]]:
    roles = pod_identity_roles(r)
    if (namespace, service_account) not in roles:
        raise SeamError(f"{workload}: no Pod Identity association for {namespace}/{service_account}")
    role_id = roles[(namespace, service_account)]
    return role_arn(r, role_id), role_policies(r, role_id)


# ---------------------------------------------------------------------- the workloads' calls


def asg_tags(r: Resolver, nodegroup_id: str) -> dict[str, str]:
    """The tags EKS puts on a managed node group's Auto Scaling group (EKS User Guide, "Managed node
    groups": the ASG is tagged for Cluster Autoscaler auto-discovery, and with eks:cluster-name and
    eks:nodegroup-name, the bare names the EKS API uses)."""
    cluster, name = r.get_att(nodegroup_id, "ClusterName"), r.get_att(nodegroup_id, "NodegroupName")
    return {"eks:cluster-name": cluster, "eks:nodegroup-name": name,
            "k8s.io/cluster-autoscaler/enabled": "true", f"k8s.io/cluster-autoscaler/{cluster}": "owned"}


def autoscaler_calls(r: Resolver, namespace="kube-system", service_account="cluster-autoscaler") -> list[Call]:
    """Cluster Autoscaler on every group it may resize (min below max)."""
    if (namespace, service_account) not in pod_identity_roles(r):
        return []
    principal, policies = _as(r, "Cluster Autoscaler", namespace, service_account)
    w, src = "Cluster Autoscaler", "cluster-autoscaler-1.36.1 cloudprovider/aws"
    calls = [Call(w, f"{src} README full-features policy", Request(principal, a, "*"), policies) for a in AUTOSCALER_READS]
    for lid in of_type(r, "AWS::EKS::Nodegroup"):
        scaling = r.properties(lid).get("ScalingConfig", {})
        if scaling.get("MinSize", 0) == scaling.get("MaxSize", 0):
            continue
        tags = {f"aws:ResourceTag/{k}": v for k, v in asg_tags(r, lid).items()}
        asg = (f"arn:{PARTITION}:autoscaling:{r.region}:{ACCOUNT}:autoScalingGroup:<uuid>:autoScalingGroupName/"
               f"eks-{r.get_att(lid, 'NodegroupName')}-<uuid>")
        calls.append(Call(w, f"{src} aws_wrapper.go getManagedNodegroupInfo (scale from zero)",
                          Request(principal, AUTOSCALER_DESCRIBE_NODEGROUP, r.get_att(lid, "Arn")), policies))
        calls += [Call(w, f"{src} auto_scaling_groups.go ({lid})", Request(principal, a, asg, tags), policies)
                  for a in AUTOSCALER_WRITES]
        template = launch_template_of(r, lid)
        if template and template[1].get("InstanceType"):
            # The group's instance type is in its launch template (a Capacity Block's): to build a node from zero,
            # aws_wrapper.go getInstanceTypeByLaunchTemplate reads it with DescribeLaunchTemplateVersions, on the
            # template the ASG names (EKS's copy of ours, merged with its own user data: its id is EKS's). A spot or
            # on-demand group names its types on the group, which EKS turns into the ASG's mixed instances policy
            # overrides: getInstanceTypesForAsgs takes the first, from DescribeAutoScalingGroups (a read above).
            arn = f"arn:{PARTITION}:ec2:{r.region}:{ACCOUNT}:launch-template/<EKS's copy of {r.ref(template[0])}>"
            calls.append(Call(w, f"{src} aws_wrapper.go getInstanceTypeByLaunchTemplate ({lid}, scale from zero)",
                              Request(principal, AUTOSCALER_LAUNCH_TEMPLATE_READ, arn), policies))
    return calls


def observability_calls(r: Resolver) -> list[Call]:
    """The amazon-cloudwatch-observability add-on: the CloudWatch agent's metrics and performance logs, and
    Fluent Bit's container logs (its cloudwatch_logs outputs write /aws/containerinsights/<cluster>/
    {application,dataplane,host}), both as amazon-cloudwatch/cloudwatch-agent."""
    if ("amazon-cloudwatch", "cloudwatch-agent") not in pod_identity_roles(r):
        return []
    principal, policies = _as(r, "CloudWatch observability", "amazon-cloudwatch", "cloudwatch-agent")
    cluster, calls = cluster_name(r), []
    calls += [Call("CloudWatch agent", "amazon-cloudwatch-agent: metrics and EBS/instance tags", Request(principal, a, "*"),
                   policies) for a in ("cloudwatch:PutMetricData", "ec2:DescribeTags", "ec2:DescribeVolumes")]
    for workload, group in (("CloudWatch agent", "performance"), ("Fluent Bit", "application"),
                            ("Fluent Bit", "dataplane"), ("Fluent Bit", "host")):
        group_arn = f"arn:{PARTITION}:logs:{r.region}:{ACCOUNT}:log-group:/aws/containerinsights/{cluster}/{group}"
        # Resource ARNs as the Service Authorization Reference's CloudWatch Logs page defines them: a log-group
        # for CreateLogStream and DescribeLogStreams, a log-stream (log-group:<name>:log-stream:<stream>) for PutLogEvents.
        for action in ("logs:CreateLogStream", "logs:DescribeLogStreams"):
            calls.append(Call(workload, "cloudwatch_logs output", Request(principal, action, group_arn), policies))
        calls.append(Call(workload, "cloudwatch_logs output", Request(
            principal, "logs:PutLogEvents", f"{group_arn}:log-stream:<stream>"), policies))
    return calls


def _bucket_policies(r: Resolver, bucket_name: str) -> tuple[Policy, ...]:
    return tuple(Policy(f"{lid} (bucket policy)", r.properties(lid)["PolicyDocument"], resource_based=True)
                 for lid in of_type(r, "AWS::S3::BucketPolicy") if r.properties(lid)["Bucket"] == bucket_name)


def ray_calls(r: Resolver, namespace: str, service_account: str) -> list[Call]:
    """Ray Train's storage (pyarrow's S3 filesystem, HTTPS): list the run's prefix, read and write checkpoints
    (multipart uploads for the large shards, aborted on failure), delete those past num_to_keep."""
    if (namespace, service_account) not in pod_identity_roles(r):
        return []
    principal, policies = _as(r, "Ray pods", namespace, service_account)
    calls = []
    for lid in of_type(r, "AWS::S3::Bucket"):
        name, bucket_arn = r.ref(lid), r.get_att(lid, "Arn")
        every = policies + _bucket_policies(r, name)
        tls = {"aws:SecureTransport": "true"}
        calls += [Call("Ray pods", "Ray Train storage (pyarrow S3)", Request(principal, a, bucket_arn, tls), every)
                  for a in ("s3:ListBucket", "s3:GetBucketLocation")]
        calls += [Call("Ray pods", "Ray Train storage (pyarrow S3)",
                       Request(principal, a, f"{bucket_arn}/runs/<run>/checkpoint_000001/model.pt", tls), every)
                  for a in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                            "s3:ListMultipartUploadParts")]
    return calls


def _ray_job(manifests: list[dict]) -> dict | None:
    return next((m for m in manifests if m.get("kind") == "RayJob"), None)


def tracking_calls(r: Resolver, manifests: list[dict]) -> list[Call]:
    """The experiment tracker's calls from rank 0 (training/tracking.py), as the Ray pods' role, read from the RayJob:
    each MLflow REST operation the trainer makes (MLFLOW_OPERATIONS) on a SageMaker tracking server, signed for
    sagemaker-mlflow and authorized as sagemaker-mlflow:<operation> (Service Authorization Reference, "Amazon
    SageMaker with MLflow"), or on an MLflow App, signed for sagemaker (sagemaker-mlflow 0.5.0 auth_provider.py) and
    authorized as sagemaker:CallMlflowAppApi; and the W&B key's secretsmanager:GetSecretValue, on the secret the
    workers name (an ARN ends in the six characters Secrets Manager appends to the name)."""
    import shlex

    from training.tracking import MLFLOW_OPERATIONS, SAGEMAKER_MLFLOW_ARN, WANDB_SECRET_ENV

    job, ray = _ray_job(manifests), ray_service_account(manifests)
    if job is None or ray is None or ray not in pod_identity_roles(r):
        return []
    principal, policies = _as(r, "Ray pods", *ray)
    options = dict(a.removeprefix("--").split("=", 1) for a in shlex.split(job["spec"]["entrypoint"]) if "=" in a)
    calls = []
    server = SAGEMAKER_MLFLOW_ARN.fullmatch(options.get("mlflow-tracking-uri", "")) if options.get("tracking") == "mlflow" else None
    if server:
        app = server.group(4) == "mlflow-app"
        for path, operation in MLFLOW_OPERATIONS.items():
            action = "sagemaker:CallMlflowAppApi" if app else f"sagemaker-mlflow:{operation}"
            calls.append(Call("Ray pods (tracking)", f"training/tracking.py MlflowClient {path}",
                              Request(principal, action, server.group(0)), policies))
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    [secret] = [e["value"] for e in worker.get("env", []) if e["name"] == WANDB_SECRET_ENV] or [None]
    if secret:
        arn = secret if secret.startswith("arn:") else f"arn:{PARTITION}:secretsmanager:{r.region}:{ACCOUNT}:secret:{secret}-AbCdEf"
        calls.append(Call("Ray pods (tracking)", "training/tracking.py W&B API key (boto3 GetSecretValue)",
                          Request(principal, "secretsmanager:GetSecretValue", arn), policies))
    return calls


def kubectl_handler_calls(r: Resolver) -> list[Call]:
    """aws-cdk-lib's kubectl provider: the framework invokes the handler (USER_ON_EVENT_FUNCTION_ARN); the
    handler writes its kubeconfig with `aws eks update-kubeconfig` (eks:DescribeCluster) before running kubectl
    or helm (aws-cdk-lib 2.275.0 custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/apply/__init__.py)."""
    calls = []
    for lid in of_type(r, "AWS::Lambda::Function"):
        env = r.resources[lid]["Properties"].get("Environment", {}).get("Variables", {})
        if "USER_ON_EVENT_FUNCTION_ARN" not in env:
            continue
        handler = logical_id_of_arn(env["USER_ON_EVENT_FUNCTION_ARN"])
        framework_role = logical_id_of_arn(r.resources[lid]["Properties"]["Role"])
        handler_role = logical_id_of_arn(r.resources[handler]["Properties"]["Role"])
        calls.append(Call("kubectl provider framework", "aws-cdk-lib custom-resources framework onEvent",
                          Request(role_arn(r, framework_role), "lambda:InvokeFunction", r.get_att(handler, "Arn")),
                          role_policies(r, framework_role)))
        calls.append(Call("kubectl handler", "aws-cdk-lib kubectl-handler (aws eks update-kubeconfig)",
                          Request(role_arn(r, handler_role), "eks:DescribeCluster", cluster_arn(r)),
                          role_policies(r, handler_role)))
    return calls


def pod_identity_calls(r: Resolver) -> list[Call]:
    """EKS Pod Identity assumes each associated role as pods.eks.amazonaws.com with sts:AssumeRole and
    sts:TagSession, tagging the session (EKS User Guide, "Pod Identity: define the session tags"):
    eks-cluster-arn, eks-cluster-name, kubernetes-namespace, kubernetes-service-account, kubernetes-pod-name,
    kubernetes-pod-uid; aws:SourceAccount and aws:SourceArn are the cluster's."""
    calls = []
    for (namespace, service_account), role_id in pod_identity_roles(r).items():
        tags = {"eks-cluster-arn": cluster_arn(r), "eks-cluster-name": cluster_name(r),
                "kubernetes-namespace": namespace, "kubernetes-service-account": service_account,
                "kubernetes-pod-name": "<pod>", "kubernetes-pod-uid": "<uid>"}
        context = {"aws:SourceAccount": ACCOUNT, "aws:SourceArn": cluster_arn(r), "aws:TagKeys": list(tags),
                   **{f"aws:RequestTag/{k}": v for k, v in tags.items()}}
        for action in ("sts:AssumeRole", "sts:TagSession"):
            calls.append(Call(f"Pod Identity for {namespace}/{service_account}", "EKS Pod Identity",
                              Request(POD_IDENTITY_PRINCIPAL, action, role_arn(r, role_id), context),
                              (trust_policy(r, role_id),)))
    return calls


def node_calls(r: Resolver, images: list[str]) -> list[Call]:
    """Each node: the Pod Identity agent's eks-auth:AssumeRoleForPodIdentity, and the kubelet's ECR
    credential provider for every private ECR image (ecr:GetAuthorizationToken, then the image's
    manifest and layers). Images on public registries are pulled anonymously: no IAM call."""
    calls = []
    for lid in of_type(r, "AWS::EKS::Nodegroup"):
        role_id = logical_id_of_arn(r.resources[lid]["Properties"]["NodeRole"])
        principal, policies = role_arn(r, role_id), role_policies(r, role_id)
        w = f"node group {lid}"
        calls.append(Call(w, "eks-pod-identity-agent", Request(principal, "eks-auth:AssumeRoleForPodIdentity",
                                                                cluster_arn(r)), policies))
        for image in images:
            repository = ecr_repository_arn(image)
            if repository is None:
                continue
            calls.append(Call(w, f"kubelet ECR credential provider ({image})",
                              Request(principal, "ecr:GetAuthorizationToken", "*"), policies))
            calls += [Call(w, f"containerd pull ({image})", Request(principal, a, repository), policies)
                      for a in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")]
    return calls


def ecr_repository_arn(image: str) -> str | None:
    """arn:aws:ecr:<region>:<account>:repository/<name> of a private ECR image reference, else None."""
    host, _, rest = image.partition("/")
    parts = host.split(".")
    if len(parts) < 6 or parts[1:3] != ["dkr", "ecr"]:
        return None
    name = rest.split("@")[0].rsplit(":", 1)[0] if ":" in rest.split("/")[-1] or "@" in rest else rest
    return f"arn:{PARTITION}:ecr:{parts[3]}:{parts[0]}:repository/{name}"


# ---------------------------------------------------------------------- the check


def ray_service_account(manifests: list[dict]) -> tuple[str, str] | None:
    for m in manifests:
        if m.get("kind") == "RayJob":
            spec = m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
            return m["metadata"]["namespace"], spec.get("serviceAccountName", "default")
    return None


def images_of(manifests: list[dict]) -> list[str]:
    found = []

    def walk(value) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("image"), str) and "containers" not in value:
                found.append(value["image"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
    walk(manifests)
    return sorted(set(found))


def all_calls(r: Resolver, manifests: list[dict]) -> list[Call]:
    calls = autoscaler_calls(r) + observability_calls(r) + kubectl_handler_calls(r) + pod_identity_calls(r)
    ray = ray_service_account(manifests)
    if ray:
        calls += ray_calls(r, *ray) + tracking_calls(r, manifests)
    return calls + node_calls(r, images_of(manifests))


def denials(calls: list[Call]) -> list[Denial]:
    found = []
    for call in calls:
        decision = evaluate(list(call.policies), call.request)
        if not decision.allowed:
            found.append(Denial(call, decision, tuple(closest_statements(list(call.policies), call.request))))
    return found

