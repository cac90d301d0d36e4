"""cdk_constructs/network.py: what the VPC logs, its default security group, and the limits of its layout."""

from __future__ import annotations

import pytest

from tests.conftest import UNDER_MUTATION, only, resources_of

pytestmark = pytest.mark.skipif(UNDER_MUTATION, reason="no synthesis under mutation testing")


def test_flow_logs_record_rejected_traffic_of_the_vpc_into_the_stacks_group(template):
    flow_log = only(template, "AWS::EC2::FlowLog")["Properties"]
    [vpc] = resources_of(template, "AWS::EC2::VPC")
    [group] = [k for k in resources_of(template, "AWS::Logs::LogGroup") if k.startswith("NetworkFlowLogs")]
    assert (flow_log["ResourceType"], flow_log["ResourceId"]) == ("VPC", {"Ref": vpc})
    assert flow_log["TrafficType"] == "REJECT"
    assert (flow_log["LogDestinationType"], flow_log["LogGroupName"]) == ("cloud-watch-logs", {"Ref": group})


def test_the_default_security_group_is_emptied(template):
    # restrict_default_security_group: aws-cdk-lib's custom resource strips its allow-all rules (cdk-nag EC2-related
    # findings and CIS 5.4).
    [vpc] = resources_of(template, "AWS::EC2::VPC")
    restrict = only(template, "Custom::VpcRestrictDefaultSG")["Properties"]
    assert restrict["DefaultSecurityGroupId"] == {"Fn::GetAtt": [vpc, "DefaultSecurityGroup"]}


@pytest.mark.parametrize("zones,nat_gateways,refused", [
    (2, 2, None), (2, 3, "nat_gateways"),  # at most one NAT gateway per AZ
    (7, 1, None), (8, 1, "availability_zones"),  # seven AZs fit the subnet layout of any VPC from /16 to /20
])
def test_the_layout_takes_one_nat_gateway_per_az_and_seven_azs(zones, nat_gateways, refused):
    import aws_cdk as cdk

    from cdk_constructs.network import Network, NetworkProps

    stack = cdk.Stack(cdk.App(), "Net")
    props = NetworkProps(availability_zones=tuple(f"us-east-1{c}" for c in "abcdefgh"[:zones]), cidr="10.0.0.0/20",
                         nat_gateways=nat_gateways)
    if refused is None:
        Network(stack, "Network", props)
    else:
        with pytest.raises(ValueError, match=refused):
            Network(stack, "Network", props)
