"""Template assertions for the network, the EKS cluster and both node groups."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from cdk_constructs.cluster import KUBECTL_LAYERS, EksCluster, EksClusterProps
from cdk_constructs.network import subnet_masks
from tests.conftest import only, resources_of, synth_stack, template_for


def gpu_nodegroup(template):
    return only(template, "AWS::EKS::Nodegroup", lambda r: r["Properties"]["AmiType"] == "AL2023_x86_64_NVIDIA")


def gpu_launch_template(template):
    return only(template, "AWS::EC2::LaunchTemplate",
                lambda r: "NetworkInterfaces" in r["Properties"]["LaunchTemplateData"])["Properties"]["LaunchTemplateData"]


# ------------------------------------------------------------------ network


def test_vpc_has_public_and_private_subnet_per_az(template):
    subnets = resources_of(template, "AWS::EC2::Subnet").values()
    public = [s for s in subnets if s["Properties"]["MapPublicIpOnLaunch"]]
    assert len(subnets) == 4 and public == []
    assert {s["Properties"]["AvailabilityZone"] for s in subnets} == {"us-east-2a", "us-east-2b"}


def test_one_nat_gateway_by_default(template):
    template.resource_count_is("AWS::EC2::NatGateway", 1)


def test_nat_gateways_configurable():
    template_for(nat_gateways=2).resource_count_is("AWS::EC2::NatGateway", 2)


def test_vpc_cidr_from_settings():
    template_for(vpc_cidr="10.8.0.0/16").has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.8.0.0/16"})


def test_vpc_flow_logs(template):
    template.resource_count_is("AWS::EC2::FlowLog", 1)


def test_s3_gateway_endpoint_routes_every_private_subnet(template):
    """Checkpoints and weights go to S3 through the free gateway, not the NAT gateway that bills per GB."""
    endpoint = only(template, "AWS::EC2::VPCEndpoint", lambda r: r["Properties"].get("VpcEndpointType") == "Gateway")["Properties"]
    assert ".s3" in str(endpoint["ServiceName"])
    private_tables = {a["Properties"]["RouteTableId"]["Ref"]
                      for a in resources_of(template, "AWS::EC2::SubnetRouteTableAssociation").values()
                      if "private" in a["Properties"]["SubnetId"]["Ref"].lower()}
    assert {t["Ref"] for t in endpoint["RouteTableIds"]} == private_tables and len(private_tables) == 2


@pytest.mark.parametrize("cidr,masks", [("10.0.0.0/16", (24, 19)), ("10.0.0.0/18", (24, 21)), ("10.0.0.0/20", (26, 23))])
def test_subnet_masks_scale_with_the_vpc(cidr, masks):
    assert subnet_masks(cidr) == masks


@pytest.mark.parametrize("cidr", ["10.0.0.0/16", "10.1.0.0/17", "10.2.0.0/18", "10.3.0.0/19", "172.16.0.0/20"])
def test_every_allowed_vpc_size_synthesizes_with_six_azs(cidr):
    """The README allows /16 to /20: each must build, with a private subnet in every AZ, in the VPC range."""
    import ipaddress

    azs = [f"us-east-1{letter}" for letter in "abcdef"]
    template = template_for(region="us-east-1", availability_zones=azs, gpu_availability_zone="us-east-1a", vpc_cidr=cidr)
    subnets = [ipaddress.IPv4Network(r["Properties"]["CidrBlock"]) for r in resources_of(template, "AWS::EC2::Subnet").values()]
    assert len(subnets) == 12 and all(net.subnet_of(ipaddress.IPv4Network(cidr)) for net in subnets)
    assert not any(a.overlaps(b) for i, a in enumerate(subnets) for b in subnets[i + 1:])


# ------------------------------------------------------------------ cluster


def test_cluster_version_and_no_auto_mode(template):
    template.has_resource_properties("AWS::EKS::Cluster", {"Version": "1.36", "ComputeConfig": {"Enabled": False}})


def test_kubectl_layer_matches_cluster_version(template):
    layer = only(template, "AWS::Lambda::LayerVersion",
                 lambda r: "kubectl" in r["Properties"].get("Description", ""))
    assert "kubectl 1.36." in layer["Properties"]["Description"]


@pytest.mark.parametrize("version", sorted(KUBECTL_LAYERS))
def test_each_kubectl_layer_is_built_for_its_kubernetes_version(version):
    """aws-cdk issue 24580: nothing checks at synth that the layer's kubectl matches the cluster."""
    module, name = KUBECTL_LAYERS[version]
    minor = version.split(".")[1]
    assert module.endswith(f"lambda_layer_kubectl_v{minor}") and name == f"KubectlV{minor}Layer"


def test_cluster_without_a_kubectl_layer_for_its_version_is_refused():
    stack = synth_stack()
    with pytest.raises(ValueError, match="kubectl layer: no layer for Kubernetes 1.35; have 1.36"):
        EksCluster(stack, "Other", EksClusterProps(vpc=stack.network.vpc, cluster_name="other", kubernetes_version="1.35"))


def test_cluster_named_after_the_stack(template):
    template.has_resource_properties("AWS::EKS::Cluster", {"Name": "EksFsdpEfa"})


def test_secrets_encrypted_with_rotating_key(template):
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    template.has_resource_properties(
        "AWS::EKS::Cluster", {"EncryptionConfig": [{"Provider": {"KeyArn": Match.any_value()}, "Resources": ["secrets"]}]}
    )


def test_control_plane_logging(template):
    cluster = only(template, "AWS::EKS::Cluster")
    enabled = {t["Type"] for t in cluster["Properties"]["Logging"]["ClusterLogging"]["EnabledTypes"]}
    assert {"api", "audit", "authenticator"} <= enabled


def test_control_plane_log_group_exists_first_with_retention(template):
    """EKS writes to /aws/eks/<name>/cluster; made by the stack first, it expires and goes with the stack."""
    [(logical_id, group)] = [(k, r) for k, r in resources_of(template, "AWS::Logs::LogGroup").items()
                             if r["Properties"].get("LogGroupName") == "/aws/eks/EksFsdpEfa/cluster"]
    assert group["Properties"]["RetentionInDays"] == 30 and group["DeletionPolicy"] == "Delete"
    cluster_id = next(iter(resources_of(template, "AWS::EKS::Cluster")))
    assert logical_id in template.to_json()["Resources"][cluster_id]["DependsOn"]


def test_every_lambda_logs_to_a_group_with_retention(template):
    groups = resources_of(template, "AWS::Logs::LogGroup")
    functions = resources_of(template, "AWS::Lambda::Function")
    assert len(functions) == 3
    for name, function in functions.items():
        target = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert groups[target]["Properties"]["RetentionInDays"] == 30, name


def test_log_retention_setting_reaches_every_group():
    groups = resources_of(template_for(log_retention_days=7), "AWS::Logs::LogGroup")
    assert len(groups) == 9 and {g["Properties"]["RetentionInDays"] for g in groups.values()} == {7}


def test_endpoint_public_cidrs_from_settings():
    template_for(endpoint_public_cidrs=["203.0.113.0/24"]).has_resource_properties(
        "AWS::EKS::Cluster",
        {"ResourcesVpcConfig": Match.object_like(
            {"EndpointPublicAccess": True, "EndpointPrivateAccess": True, "PublicAccessCidrs": ["203.0.113.0/24"]})},
    )


def test_private_endpoint():
    template_for(endpoint_access="private").has_resource_properties(
        "AWS::EKS::Cluster",
        {"ResourcesVpcConfig": Match.object_like({"EndpointPublicAccess": False, "EndpointPrivateAccess": True})},
    )


def test_admin_access_entry():
    arn = "arn:aws:iam::123456789012:role/platform-admin"
    entry = only(template_for(admin_principal_arn=arn), "AWS::EKS::AccessEntry",
                 lambda r: r["Properties"]["PrincipalArn"] == arn)
    [policy] = entry["Properties"]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert "cluster-access-policy/AmazonEKSClusterAdminPolicy" in str(policy["PolicyArn"])


def test_no_default_capacity(template):
    # Exactly our two node groups: nothing from default_capacity.
    template.resource_count_is("AWS::EKS::Nodegroup", 2)


# ------------------------------------------------------------------ node groups


def test_system_nodegroup(template):
    template.has_resource_properties("AWS::EKS::Nodegroup", {
        "InstanceTypes": ["m7i.xlarge"], "AmiType": "AL2023_x86_64_STANDARD",
        "Labels": {"role": "system"}, "ScalingConfig": {"DesiredSize": 1, "MaxSize": 1, "MinSize": 1},
    })


def test_gpu_nodegroup_ami_labels_count(template):
    props = gpu_nodegroup(template)["Properties"]
    assert props["InstanceTypes"] == ["g6.12xlarge"]
    assert props["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 2}  # tests/infra/test_autoscaler.py
    assert props["Labels"] == {"role": "gpu-worker", "nvidia.com/gpu.present": "true", "k8s.amazonaws.com/accelerator": "nvidia-l4"}
    assert props["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": "nvidia.com/gpu", "Value": "true"}]


def test_gpu_nodegroup_in_exactly_one_private_subnet_of_the_gpu_az():
    template = template_for(gpu_availability_zone="us-east-2b")
    subnets = gpu_nodegroup(template)["Properties"]["Subnets"]
    assert len(subnets) == 1
    subnet = template.to_json()["Resources"][subnets[0]["Ref"]]["Properties"]
    assert subnet["AvailabilityZone"] == "us-east-2b" and subnet["MapPublicIpOnLaunch"] is False


def test_gpu_launch_template_one_efa_interface_on_g6(template):
    interfaces = gpu_launch_template(template)["NetworkInterfaces"]
    assert [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in interfaces] == [(0, 0, "efa")]


def test_p5_gets_32_efa_interfaces():
    interfaces = gpu_launch_template(template_for(gpu_instance_type="p5.48xlarge"))["NetworkInterfaces"]
    assert len(interfaces) == 32
    assert interfaces[0]["InterfaceType"] == "efa"
    assert {i["InterfaceType"] for i in interfaces[1:]} == {"efa-only"}
    assert [i["NetworkCardIndex"] for i in interfaces] == list(range(32))
    # EC2 User Guide, "Maximize network bandwidth on Amazon EC2 instances with multiple network cards":
    # each further EFA-only interface takes the next card at device index 0.
    assert {i["DeviceIndex"] for i in interfaces} == {0}


def test_efa_interfaces_carry_cluster_and_efa_security_groups(template):
    groups = gpu_launch_template(template)["NetworkInterfaces"][0]["Groups"]
    assert any(g.get("Fn::GetAtt", [None, None])[1] == "ClusterSecurityGroupId" for g in groups)
    efa_sg = [g["Fn::GetAtt"][0] for g in groups if g["Fn::GetAtt"][1] == "GroupId"]
    assert len(efa_sg) == 1 and "Efa" in efa_sg[0]


def test_launch_template_has_no_subnet_and_no_ssh_key(template):
    for lt in resources_of(template, "AWS::EC2::LaunchTemplate").values():
        data = lt["Properties"]["LaunchTemplateData"]
        assert "KeyName" not in data and "SubnetId" not in str(data)
    for ng in resources_of(template, "AWS::EKS::Nodegroup").values():
        assert "RemoteAccess" not in ng["Properties"]


def test_efa_security_group_allows_all_to_and_from_itself(template):
    ingress = only(template, "AWS::EC2::SecurityGroupIngress")["Properties"]
    egress = only(template, "AWS::EC2::SecurityGroupEgress")["Properties"]
    assert ingress["IpProtocol"] == "-1" and ingress["SourceSecurityGroupId"] == ingress["GroupId"]
    assert egress["IpProtocol"] == "-1" and egress["DestinationSecurityGroupId"] == egress["GroupId"]


def test_cluster_placement_group_by_default(template):
    [group_id] = resources_of(template, "AWS::EC2::PlacementGroup")
    template.has_resource_properties("AWS::EC2::PlacementGroup", {"Strategy": "cluster"})
    assert gpu_launch_template(template)["Placement"] == {"GroupName": {"Ref": group_id}}


def test_reservation_targets_and_drops_placement_group():
    template = template_for(capacity_reservation_id="cr-0123456789abcdef0")
    data = gpu_launch_template(template)
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}}
    assert "Placement" not in data
    template.resource_count_is("AWS::EC2::PlacementGroup", 0)


def test_placement_group_forced_on_with_reservation_is_refused():
    from stacks.context import settings_from_context
    from stacks.settings import SettingsError
    from tests.conftest import base_context

    with pytest.raises(SettingsError, match=r"placement_group: on with capacity_reservation_id cannot launch"):
        settings_from_context(base_context() | {"capacity_reservation_id": "cr-0123456789abcdef0", "placement_group": "on"})


def test_placement_group_off():
    template_for(placement_group="off").resource_count_is("AWS::EC2::PlacementGroup", 0)


def test_imdsv2_required_with_hop_limit_1(template):
    """No pod can reach the instance metadata, so none can take the node role (hop limit 1)."""
    templates = resources_of(template, "AWS::EC2::LaunchTemplate").values()
    assert len(templates) == 2
    for lt in templates:
        assert lt["Properties"]["LaunchTemplateData"]["MetadataOptions"] == {
            "HttpTokens": "required", "HttpPutResponseHopLimit": 1, "HttpEndpoint": "enabled"}


def test_system_root_volume_holds_the_ray_image(template):
    system = only(template, "AWS::EC2::LaunchTemplate",
                  lambda r: "NetworkInterfaces" not in r["Properties"]["LaunchTemplateData"])
    assert system["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 80


def test_gpu_root_volume_gp3_encrypted_200gib(template):
    ebs = gpu_launch_template(template)["BlockDeviceMappings"][0]["Ebs"]
    assert ebs == {"VolumeSize": 200, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}


def test_gpu_disk_size_from_settings():
    ebs = gpu_launch_template(template_for(gpu_node_disk_gib=500))["BlockDeviceMappings"][0]["Ebs"]
    assert ebs["VolumeSize"] == 500


def test_tags_on_resources(template):
    template.has_resource_properties("AWS::EC2::VPC", {"Tags": Match.array_with([{"Key": "project", "Value": "eks-fsdp-efa"}])})


@pytest.mark.parametrize("overrides", [{}, {"capacity_reservation_id": "cr-0123456789abcdef0"}])
def test_gpu_nodes_are_on_demand_by_default_and_with_a_reservation(overrides):
    """On-Demand: what preflight's quota check counts ("Running On-Demand ... instances") and the only kind an
    On-Demand Capacity Reservation serves (EC2 User Guide, "On-Demand Capacity Reservations"); spot and Capacity
    Blocks are asked for by gpu_capacity_type (tests/infra/test_capacity.py)."""
    assert gpu_nodegroup(template_for(**overrides))["Properties"]["CapacityType"] == "ON_DEMAND"
