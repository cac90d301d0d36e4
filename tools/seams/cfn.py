"""CloudFormation's side of the seam: a synthesized template resolved the way CloudFormation resolves it.

Every `Ref` and `Fn::GetAtt` becomes what CloudFormation returns for that resource type ("Return values"
section of each type's page in the CloudFormation User Guide, AWS resource and property types reference).
Values only known at deploy time become typed placeholders such as `<AWS::EKS::Nodegroup NodegroupName
GpuNodes>`, so two values are equal after resolution exactly when CloudFormation would make them equal.
A type or attribute missing from RETURN_VALUES fails loudly: the table grows with the stack.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Callable


class SeamError(Exception):
    """The harness cannot model something the template uses: extend the table, never guess."""


PARTITION, ACCOUNT, URL_SUFFIX = "aws", "111122223333", "amazonaws.com"
"""Pseudo parameters: fixed example values (CloudFormation User Guide, "Pseudo parameters reference")."""


def placeholder(kind: str, what: str, logical_id: str) -> str:
    return f"<{kind} {what} {logical_id}>"


@dataclass(frozen=True)
class Resolver:
    template: dict
    region: str = "us-east-2"
    stack_name: str = "<AWS::StackName>"

    @property
    def resources(self) -> dict:
        return self.template.get("Resources", {})

    # ------------------------------------------------------------------ names and ARNs

    def name_of(self, logical_id: str, prop: str) -> str:
        """A resource's name: its name property when set, else the name CloudFormation generates."""
        resource = self.resources[logical_id]
        value = resource.get("Properties", {}).get(prop)
        if value is not None:
            return self.resolve(value)
        return placeholder(resource["Type"], "generated-name", logical_id)

    def arn(self, service: str, resource: str, region: bool = True, account: bool = True) -> str:
        return (f"arn:{PARTITION}:{service}:{self.region if region else ''}:"
                f"{ACCOUNT if account else ''}:{resource}")

    def ref(self, logical_id: str) -> str:
        if logical_id.startswith("AWS::"):
            return self._pseudo(logical_id)
        if logical_id in self.template.get("Parameters", {}):
            parameter = self.template["Parameters"][logical_id]
            if parameter.get("Type", "").startswith("AWS::SSM::Parameter::Value"):
                return placeholder("Parameter", "ssm-value", logical_id)
            if "Default" not in parameter:
                raise SeamError(f"parameter {logical_id} has no default: the harness resolves defaults only")
            return str(parameter["Default"])
        kind = self._type(logical_id)
        entry = RETURN_VALUES.get(kind) or (RETURN_VALUES["Custom::"] if kind.startswith("Custom::") else None)
        if entry is None:
            raise SeamError(f"{logical_id}: no Ref return value known for {kind}; add it to tools/seams/cfn.py "
                            "RETURN_VALUES from the type's 'Return values' in the CloudFormation User Guide")
        return entry[0](self, logical_id)

    def get_att(self, logical_id: str, attribute: str) -> str:
        kind = self._type(logical_id)
        entry = RETURN_VALUES.get(kind)
        if kind.startswith("Custom::"):  # a custom resource's attributes are whatever its handler returns in Data
            return placeholder(kind, f"Data.{attribute}", logical_id)
        if entry is None or attribute not in entry[1]:
            raise SeamError(f"{logical_id}: no Fn::GetAtt {attribute} known for {kind}; add it to tools/seams/cfn.py "
                            "RETURN_VALUES from the type's 'Return values' in the CloudFormation User Guide")
        return entry[1][attribute](self, logical_id)

    def _type(self, logical_id: str) -> str:
        if logical_id not in self.resources:
            raise SeamError(f"Ref/GetAtt to {logical_id}, which the template does not define")
        return self.resources[logical_id]["Type"]

    def _pseudo(self, name: str) -> str:
        values = {"AWS::Partition": PARTITION, "AWS::AccountId": ACCOUNT, "AWS::Region": self.region,
                  "AWS::URLSuffix": URL_SUFFIX, "AWS::StackName": self.stack_name,
                  "AWS::StackId": self.arn("cloudformation", f"stack/{self.stack_name}/<uuid>")}
        if name not in values:
            raise SeamError(f"pseudo parameter {name} is not modelled")
        return values[name]

    # ------------------------------------------------------------------ intrinsic functions

    def resolve(self, value):
        """`value` with every intrinsic function evaluated (AWS::NoValue drops the key or list item)."""
        if isinstance(value, list):
            return [v for v in (self.resolve(item) for item in value) if v is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, arg), = value.items()
            if key == "Ref":
                return _NO_VALUE if arg == "AWS::NoValue" else self.ref(arg)
            if key.startswith("Fn::") or key == "Condition":
                return self._function(key, arg)
        resolved = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    def _function(self, key: str, arg):
        if key == "Fn::GetAtt":
            logical_id, attribute = arg.split(".", 1) if isinstance(arg, str) else arg
            return self.get_att(logical_id, self.resolve(attribute))
        if key == "Fn::Join":
            separator, parts = arg
            return self.resolve(separator).join(str(p) for p in self.resolve(parts))
        if key == "Fn::Select":
            index, items = self.resolve(arg)
            return items[int(index)]
        if key == "Fn::Split":
            separator, text = self.resolve(arg)
            return text.split(separator)
        if key == "Fn::Sub":
            text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))
            return _SUB.sub(lambda m: self._sub_variable(m.group(1), variables), text)
        if key == "Fn::Base64":
            return base64.b64encode(str(self.resolve(arg)).encode()).decode()
        if key == "Fn::If":
            condition, when_true, when_false = arg
            return self.resolve(when_true if self.condition(condition) else when_false)
        if key in ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Condition"):
            return self._boolean(key, arg)
        raise SeamError(f"intrinsic function {key} is not modelled in tools/seams/cfn.py")

    def _sub_variable(self, name: str, variables: dict) -> str:
        if name.startswith("!"):  # ${!Literal} is written as ${Literal}
            return "${" + name[1:] + "}"
        if name in variables:
            return str(variables[name])
        if "." in name:
            logical_id, attribute = name.split(".", 1)
            return self.get_att(logical_id, attribute)
        return self.ref(name)

    def condition(self, name: str) -> bool:
        conditions = self.template.get("Conditions", {})
        if name not in conditions:
            raise SeamError(f"condition {name} is not defined in the template")
        return bool(self.resolve(conditions[name]))

    def _boolean(self, key: str, arg) -> bool:
        if key == "Condition":
            return self.condition(arg)
        if key == "Fn::Equals":
            left, right = self.resolve(arg)
            return str(left) == str(right)
        values = [self.resolve(a) for a in arg]
        return {"Fn::Not": lambda: not values[0], "Fn::And": lambda: all(values), "Fn::Or": lambda: any(values)}[key]()

    def properties(self, logical_id: str) -> dict:
        return self.resolve(self.resources[logical_id].get("Properties", {}))


_NO_VALUE = object()
_SUB = re.compile(r"\$\{([^}]+)\}")


# ---------------------------------------------------------------------- return values per resource type

Value = Callable[[Resolver, str], str]


def _id(kind: str, what: str = "id") -> Value:
    return lambda r, lid: placeholder(kind, what, lid)


def _physical(kind: str) -> tuple[Value, dict[str, Value]]:
    """A type whose Ref is a generated physical ID and which these templates never GetAtt."""
    return _id(kind), {}


def _nodegroup_name(r: Resolver, lid: str) -> str:
    return r.name_of(lid, "NodegroupName")


def _nodegroup_cluster(r: Resolver, lid: str) -> str:
    return r.resolve(r.resources[lid]["Properties"]["ClusterName"])


def _log_group_arn(r: Resolver, lid: str) -> str:
    # AWS::Logs::LogGroup Arn ends in ":*" (its page: "arn:aws:logs:us-west-1:123456789012:log-group:/mystack-testgroup-12ABC1AHYI:*").
    return r.arn("logs", f"log-group:{r.name_of(lid, 'LogGroupName')}:*")


RETURN_VALUES: dict[str, tuple[Value, dict[str, Value]]] = {
    # Each entry: (Ref, {attribute: Fn::GetAtt}), from "Return values" of the type's User Guide page. Where no
    # seam reads a value yet (an ID, an add-on's Ref), it is a typed placeholder; refine it from its page when one does.
    "AWS::EC2::EIP": (_id("AWS::EC2::EIP", "public-ip"), {
        "AllocationId": _id("AWS::EC2::EIP", "allocation-id"), "PublicIp": _id("AWS::EC2::EIP", "public-ip")}),
    "AWS::EC2::FlowLog": (_id("AWS::EC2::FlowLog"), {"Id": _id("AWS::EC2::FlowLog")}),
    "AWS::EC2::InternetGateway": (_id("AWS::EC2::InternetGateway"), {"InternetGatewayId": _id("AWS::EC2::InternetGateway")}),
    # Ref: the launch template ID; LatestVersionNumber / DefaultVersionNumber: numbers CloudFormation assigns.
    "AWS::EC2::LaunchTemplate": (_id("AWS::EC2::LaunchTemplate"), {
        "LaunchTemplateId": _id("AWS::EC2::LaunchTemplate"),
        "LatestVersionNumber": _id("AWS::EC2::LaunchTemplate", "latest-version"),
        "DefaultVersionNumber": _id("AWS::EC2::LaunchTemplate", "default-version")}),
    "AWS::EC2::NatGateway": (_id("AWS::EC2::NatGateway"), {"NatGatewayId": _id("AWS::EC2::NatGateway")}),
    # Ref: the placement group's name.
    "AWS::EC2::PlacementGroup": (lambda r, lid: r.name_of(lid, "GroupName"),
                                 {"GroupName": lambda r, lid: r.name_of(lid, "GroupName")}),
    "AWS::EC2::Route": _physical("AWS::EC2::Route"),
    "AWS::EC2::RouteTable": (_id("AWS::EC2::RouteTable"), {"RouteTableId": _id("AWS::EC2::RouteTable")}),
    # Ref: the security group's ID (for a group in a VPC); GroupId the same ID.
    "AWS::EC2::SecurityGroup": (_id("AWS::EC2::SecurityGroup"), {
        "GroupId": _id("AWS::EC2::SecurityGroup"), "VpcId": _id("AWS::EC2::VPC", "of-security-group")}),
    "AWS::EC2::SecurityGroupEgress": _physical("AWS::EC2::SecurityGroupEgress"),
    "AWS::EC2::SecurityGroupIngress": _physical("AWS::EC2::SecurityGroupIngress"),
    "AWS::EC2::Subnet": (_id("AWS::EC2::Subnet"), {
        "SubnetId": _id("AWS::EC2::Subnet"), "AvailabilityZone": _id("AWS::EC2::Subnet", "availability-zone"),
        "VpcId": _id("AWS::EC2::VPC", "of-subnet")}),
    "AWS::EC2::SubnetRouteTableAssociation": _physical("AWS::EC2::SubnetRouteTableAssociation"),
    "AWS::EC2::VPC": (_id("AWS::EC2::VPC"), {
        "VpcId": _id("AWS::EC2::VPC"), "CidrBlock": lambda r, lid: r.properties(lid).get("CidrBlock"),
        "DefaultSecurityGroup": _id("AWS::EC2::SecurityGroup", "default-of-vpc"),
        "DefaultNetworkAcl": _id("AWS::EC2::NetworkAcl", "default-of-vpc")}),
    "AWS::EC2::VPCEndpoint": (_id("AWS::EC2::VPCEndpoint"), {"Id": _id("AWS::EC2::VPCEndpoint")}),
    "AWS::EC2::VPCGatewayAttachment": _physical("AWS::EC2::VPCGatewayAttachment"),
    # Ref: "<cluster-name>|<principal-arn>"; AccessEntryArn.
    "AWS::EKS::AccessEntry": (
        lambda r, lid: f"{r.properties(lid)['ClusterName']}|{r.properties(lid)['PrincipalArn']}",
        {"AccessEntryArn": _id("AWS::EKS::AccessEntry", "arn")}),
    # Ref: "<cluster-name>,<addon-name>"; Arn.
    "AWS::EKS::Addon": (lambda r, lid: f"{r.properties(lid)['ClusterName']},{r.properties(lid)['AddonName']}",
                        {"Arn": lambda r, lid: r.arn("eks", f"addon/{r.properties(lid)['ClusterName']}/"
                                                            f"{r.properties(lid)['AddonName']}/<uuid>")}),
    # Ref: the cluster's name.
    "AWS::EKS::Cluster": (lambda r, lid: r.name_of(lid, "Name"), {
        "Arn": lambda r, lid: r.arn("eks", f"cluster/{r.name_of(lid, 'Name')}"),
        "ClusterSecurityGroupId": _id("AWS::EC2::SecurityGroup", "of-eks-cluster"),
        "CertificateAuthorityData": _id("AWS::EKS::Cluster", "certificate-authority"),
        "Endpoint": _id("AWS::EKS::Cluster", "endpoint"),
        "EncryptionConfigKeyArn": _id("AWS::EKS::Cluster", "encryption-key-arn"),
        "Id": _id("AWS::EKS::Cluster", "id"),
        "OpenIdConnectIssuerUrl": _id("AWS::EKS::Cluster", "oidc-issuer")}),
    # Ref: "<cluster-name>/<nodegroup-name>" (aws-cdk issue 22442: "The result of myNodegroup.nodegroupName
    # is something like mycluster/mynodegroup"); NodegroupName: the bare name; Arn carries both and a UUID.
    "AWS::EKS::Nodegroup": (lambda r, lid: f"{_nodegroup_cluster(r, lid)}/{_nodegroup_name(r, lid)}", {
        "NodegroupName": _nodegroup_name, "ClusterName": _nodegroup_cluster,
        "Arn": lambda r, lid: r.arn("eks", f"nodegroup/{_nodegroup_cluster(r, lid)}/{_nodegroup_name(r, lid)}/<uuid>"),
        "Id": lambda r, lid: f"{_nodegroup_cluster(r, lid)}/{_nodegroup_name(r, lid)}"}),
    # Ref: the association's ARN.
    "AWS::EKS::PodIdentityAssociation": (_id("AWS::EKS::PodIdentityAssociation", "arn"), {
        "AssociationArn": _id("AWS::EKS::PodIdentityAssociation", "arn"),
        "AssociationId": _id("AWS::EKS::PodIdentityAssociation", "id")}),
    "AWS::IAM::Policy": _physical("AWS::IAM::Policy"),
    # Ref: the role's name; Arn: arn:aws:iam::<account>:role/<path><name>.
    "AWS::IAM::Role": (lambda r, lid: r.name_of(lid, "RoleName"), {
        "Arn": lambda r, lid: r.arn("iam", f"role{r.properties(lid).get('Path', '/')}{r.name_of(lid, 'RoleName')}",
                                    region=False),
        "RoleId": _id("AWS::IAM::Role", "role-id")}),
    # Ref: the key ID; Arn: arn:aws:kms:<region>:<account>:key/<key-id>.
    "AWS::KMS::Key": (_id("AWS::KMS::Key", "key-id"), {
        "Arn": lambda r, lid: r.arn("kms", f"key/{placeholder('AWS::KMS::Key', 'key-id', lid)}"),
        "KeyId": _id("AWS::KMS::Key", "key-id")}),
    # Ref: the function's name; Arn.
    "AWS::Lambda::Function": (lambda r, lid: r.name_of(lid, "FunctionName"), {
        "Arn": lambda r, lid: r.arn("lambda", f"function:{r.name_of(lid, 'FunctionName')}")}),
    # Ref: the layer version's ARN.
    "AWS::Lambda::LayerVersion": (_id("AWS::Lambda::LayerVersion", "arn"),
                                  {"LayerVersionArn": _id("AWS::Lambda::LayerVersion", "arn")}),
    # Ref: the log group's name.
    "AWS::Logs::LogGroup": (lambda r, lid: r.name_of(lid, "LogGroupName"), {"Arn": _log_group_arn}),
    # Ref: the repository's name; Arn, RepositoryUri <account>.dkr.ecr.<region>.amazonaws.com/<name>.
    "AWS::ECR::Repository": (lambda r, lid: r.name_of(lid, "RepositoryName"), {
        "Arn": lambda r, lid: r.arn("ecr", f"repository/{r.name_of(lid, 'RepositoryName')}"),
        "RepositoryUri": lambda r, lid: f"{ACCOUNT}.dkr.ecr.{r.region}.{URL_SUFFIX}/{r.name_of(lid, 'RepositoryName')}"}),
    # Ref: the bucket's name; Arn: arn:aws:s3:::<name> (no region, no account).
    "AWS::S3::Bucket": (lambda r, lid: r.name_of(lid, "BucketName"), {
        "Arn": lambda r, lid: f"arn:{PARTITION}:s3:::{r.name_of(lid, 'BucketName')}",
        "DomainName": lambda r, lid: f"{r.name_of(lid, 'BucketName')}.s3.{URL_SUFFIX}",
        "RegionalDomainName": lambda r, lid: f"{r.name_of(lid, 'BucketName')}.s3.{r.region}.{URL_SUFFIX}"}),
    "AWS::S3::BucketPolicy": _physical("AWS::S3::BucketPolicy"),
    # Ref: the parameter's name.
    "AWS::SSM::Parameter": (lambda r, lid: r.name_of(lid, "Name"), {"Value": _id("AWS::SSM::Parameter", "value")}),
    # A custom resource: Ref is the physical ID its handler returns.
    "Custom::": (lambda r, lid: placeholder(r.resources[lid]["Type"], "physical-id", lid), {}),
}


def resolve_template(template: dict, region: str | None = None) -> Resolver:
    """A resolver for `template`; the region is the one the template was synthesized for when it names one."""
    return Resolver(template, region or template_region(template))


def template_region(template: dict) -> str:
    """The region baked into an environment-specific synth (the asset bucket's name ends with it)."""
    for resource in template.get("Resources", {}).values():
        bucket = resource.get("Properties", {}).get("Code", {}).get("S3Bucket")
        if isinstance(bucket, dict) and "Fn::Sub" in bucket:
            match = re.search(r"-([a-z]{2}(?:-[a-z]+)+-\d)$", bucket["Fn::Sub"])
            if match:
                return match.group(1)
    return "us-east-2"
