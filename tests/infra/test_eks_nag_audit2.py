"""EksV2-EKS1 reads every open range, IPv6's included."""

import pytest
from cdk_nag import NagRuleCompliance

from stacks.eks_nag import public_endpoint_compliance


@pytest.mark.parametrize("cidrs, expected", [
    (["203.0.113.7/32", "::/0"], NagRuleCompliance.NON_COMPLIANT),  # every IPv6 address
    (["203.0.113.7/32", "2001:db8::/32"], NagRuleCompliance.COMPLIANT),
])
def test_an_open_ipv6_range_among_the_cidrs_is_an_open_endpoint(cidrs, expected):
    assert public_endpoint_compliance({"endpointPublicAccess": True, "publicAccessCidrs": cidrs}) == expected
