"""IAM's side of the seam: does a role's policy set allow a call?

A small evaluator of IAM's documented logic (IAM User Guide, "Policy evaluation logic" and "IAM JSON policy
elements reference"), for the policies a stack synthesizes, resolved by tools.seams.cfn:
- an explicit Deny in any applicable policy wins; else an Allow in an identity policy or in the
  resource's policy (same account) allows; else the call is denied implicitly;
- Action / NotAction match case-insensitively with * and ? wildcards; Resource / NotResource match
  case-sensitively with the same wildcards;
- a Condition block is the AND of its operators, an operator the AND of its keys, a key the OR of its
  values; ForAnyValue / ForAllValues for multivalued keys; the IfExists suffix; Null;
- a missing key makes a condition false, except under ForAllValues and the negated operators (StringNotEquals,
  StringNotLike, ArnNotEquals, ArnNotLike), where it is true ("Condition operators": "If the key that
  you specify in a policy condition is not present in the request context, the values do not match",
  and the negated operators return true then).
What it does not model (permissions boundaries, SCPs, session policies, policy variables) the stack does not use;
a policy variable (${...}) in a policy fails loudly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tools.seams.cfn import SeamError


@dataclass(frozen=True)
class Request:
    principal: str
    """The calling principal's ARN (a role's ARN), or a service principal such as pods.eks.amazonaws.com."""
    action: str
    resource: str
    context: dict = field(default_factory=dict)
    """Condition keys in the request context: aws:ResourceTag/<k>, aws:SecureTransport ("true"/"false"), ..."""


@dataclass(frozen=True)
class Policy:
    name: str
    document: dict
    resource_based: bool = False


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    """Which statement decided: the Deny that matched, the Allow that matched, or none."""


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _wildcard(pattern: str, value: str, case_sensitive: bool) -> bool:
    if "${" in pattern:
        raise SeamError(f"policy variable in {pattern!r} is not modelled")
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, 0 if case_sensitive else re.IGNORECASE) is not None


def _action_matches(statement: dict, action: str) -> bool:
    if "Action" in statement:
        return any(_wildcard(a, action, False) for a in _as_list(statement["Action"]))
    return not any(_wildcard(a, action, False) for a in _as_list(statement["NotAction"]))


def _resource_matches(statement: dict, resource: str) -> bool:
    if "Resource" in statement:
        return any(_wildcard(r, resource, True) for r in _as_list(statement["Resource"]))
    if "NotResource" in statement:
        return not any(_wildcard(r, resource, True) for r in _as_list(statement["NotResource"]))
    return True  # a trust policy's statements name no resource: the role itself


def _principal_matches(statement: dict, principal: str) -> bool:
    if "Principal" not in statement:
        return True
    value = statement["Principal"]
    if value == "*":
        return True
    # An Allow naming the account delegates to the account's identity policies: it grants its roles nothing by itself
    # (IAM User Guide, "AWS JSON policy elements: Principal", AWS account principals); a Deny naming it denies them.
    delegated = statement["Effect"] == "Deny"
    return any(p == "*" or p == principal or (kind == "AWS" and delegated and _account_root_covers(p, principal))
               for kind, ps in value.items() for p in _as_list(ps))


def _account_root_covers(root: str, principal: str) -> bool:
    """arn:aws:iam::<account>:root in a resource policy names the whole account, a role included."""
    match = re.fullmatch(r"arn:[^:]+:iam::(\d+):root", root)
    return bool(match) and f":iam::{match.group(1)}:" in principal


_NEGATED = {"StringNotEquals", "StringNotEqualsIgnoreCase", "StringNotLike", "ArnNotEquals", "ArnNotLike",
            "NumericNotEquals"}


def _compare(base: str, expected: str, actual: str) -> bool:
    if base in ("StringEquals", "StringNotEquals"):
        return actual == expected
    if base in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return actual.lower() == expected.lower()
    if base in ("StringLike", "StringNotLike"):
        return _wildcard(expected, actual, True)
    if base in ("ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike"):
        # ArnLike compares each of the six colon-separated parts with wildcards ("ARN condition operators").
        e, a = expected.split(":", 5), actual.split(":", 5)
        return len(e) == len(a) == 6 and all(_wildcard(x, y, True) for x, y in zip(e, a))
    if base == "Bool":
        return actual.lower() == str(expected).lower()
    if base in ("NumericEquals", "NumericNotEquals"):
        return float(actual) == float(expected)
    if base == "NumericLessThan":
        return float(actual) < float(expected)
    if base == "NumericLessThanEquals":
        return float(actual) <= float(expected)
    if base == "NumericGreaterThan":
        return float(actual) > float(expected)
    if base == "NumericGreaterThanEquals":
        return float(actual) >= float(expected)
    raise SeamError(f"condition operator {base} is not modelled")


def _condition_holds(operator: str, key: str, expected, context: dict) -> bool:
    qualifier, _, operator = operator.rpartition(":")
    if_exists = operator.endswith("IfExists")
    operator = operator.removesuffix("IfExists")
    expected = [str(e).lower() if isinstance(e, bool) else str(e) for e in _as_list(expected)]
    present = key in context
    if operator == "Null":
        return (not present) == (expected[0] == "true")
    if not present:
        # "Single-valued vs. multivalued context keys": ForAllValues also returns true when the key is not in
        # the request at all (why IAM warns against it with Allow).
        return if_exists or operator in _NEGATED or qualifier == "ForAllValues"
    actual = [str(a).lower() if isinstance(a, bool) else str(a) for a in _as_list(context[key])]
    negated = operator in _NEGATED

    def one(value: str) -> bool:
        hit = any(_compare(operator, e, value) for e in expected)
        return not hit if negated else hit

    if qualifier == "ForAllValues":
        return all(one(v) for v in actual)
    if qualifier in ("ForAnyValue", ""):
        return any(one(v) for v in actual)
    raise SeamError(f"condition set operator {qualifier} is not modelled")


def _conditions_hold(statement: dict, context: dict) -> bool:
    return all(_condition_holds(op, key, expected, context)
               for op, block in statement.get("Condition", {}).items() for key, expected in block.items())


def statement_applies(statement: dict, request: Request, resource_based: bool) -> bool:
    return (_action_matches(statement, request.action) and _resource_matches(statement, request.resource)
            and (not resource_based or _principal_matches(statement, request.principal))
            and _conditions_hold(statement, request.context))


def _label(policy: Policy, index: int, statement: dict) -> str:
    sid = statement.get("Sid")
    return f"{policy.name} statement {index}" + (f" ({sid})" if sid else "")


def evaluate(policies: list[Policy], request: Request) -> Decision:
    allow = None
    for policy in policies:
        for index, statement in enumerate(_as_list(policy.document.get("Statement", []))):
            if not statement_applies(statement, request, policy.resource_based):
                continue
            if statement["Effect"] == "Deny":
                return Decision(False, f"explicitly denied by {_label(policy, index, statement)}")
            allow = allow or _label(policy, index, statement)
    if allow:
        return Decision(True, f"allowed by {allow}")
    return Decision(False, "implicitly denied: no statement allows it")


def closest_statements(policies: list[Policy], request: Request) -> list[str]:
    """The Allow statements that name the action and resource but whose conditions fail: what a
    denial most likely means (e.g. a tag condition that never matches)."""
    found = []
    for policy in policies:
        for index, statement in enumerate(_as_list(policy.document.get("Statement", []))):
            if (statement["Effect"] == "Allow" and _action_matches(statement, request.action)
                    and _resource_matches(statement, request.resource) and not _conditions_hold(statement, request.context)):
                found.append(f"{_label(policy, index, statement)}: Condition {statement['Condition']}")
    return found
