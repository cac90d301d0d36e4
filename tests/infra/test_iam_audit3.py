"""tools.seams.iam: a condition this model does not know stops the check rather than being read as true or false
(a guessed Allow or Deny could hide a real denial)."""

from __future__ import annotations

import pytest

from tools.seams.cfn import SeamError
from tools.seams.iam import Policy, Request, evaluate

ROLE = "arn:aws:iam::111122223333:role/ray"
REQUEST = Request(ROLE, "s3:GetObject", "arn:aws:s3:::checkpoints/x", {"aws:SourceIp": "10.0.0.1",
                                                                    "aws:TagKeys": ["team", "cost"]})


def _policy(condition: dict) -> list[Policy]:
    return [Policy("p", {"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*",
                                        "Condition": condition}]})]


@pytest.mark.parametrize("operator", ["IpAddress", "DateGreaterThan", "BinaryEquals"])
def test_a_condition_operator_not_modelled_stops_the_check_naming_it(operator):
    # IAM's condition operators (IAM JSON policy elements: Condition operators) this model does not compare.
    with pytest.raises(SeamError, match=f"^condition operator {operator} is not modelled$"):
        evaluate(_policy({operator: {"aws:SourceIp": "10.0.0.0/8"}}), REQUEST)


def test_a_set_qualifier_other_than_for_all_or_for_any_value_stops_the_check_naming_it():
    with pytest.raises(SeamError, match="^condition set operator ForSomeValues is not modelled$"):
        evaluate(_policy({"ForSomeValues:StringEquals": {"aws:TagKeys": "team"}}), REQUEST)


@pytest.mark.parametrize("qualifier, allowed", [("ForAnyValue:", True), ("ForAllValues:", False), ("", True)])
def test_the_two_set_qualifiers_and_none_are_judged(qualifier, allowed):
    # Tag keys team and cost against "team": one of them matches (ForAnyValue, and a plain operator on a
    # multivalued key), not all of them (ForAllValues).
    assert evaluate(_policy({f"{qualifier}StringEquals": {"aws:TagKeys": "team"}}), REQUEST).allowed is allowed
