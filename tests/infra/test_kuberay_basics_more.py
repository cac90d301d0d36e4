"""cdk_constructs/kuberay_basics.py case by case: version.ParseGeneric's uninterpreted tail and IsQualifiedName's
prefix (k8s.io/apimachinery pkg/util/version and pkg/util/validation), as KubeRay's rules read them."""

from __future__ import annotations

import pytest

from cdk_constructs.kuberay_basics import at_least, is_qualified_name, parse_generic_version


# ParseGeneric: two or more dot-separated numbers, then "arbitrary uninterpreted data (which need not be separated
# from the final numeric field by punctuation)": a release candidate or a local build suffix parses as its numbers.
@pytest.mark.parametrize("text,parsed", [
    ("2.56.0-rc1", (2, 56, 0)), ("2.56.0rc1", (2, 56, 0)), ("2.58.0+cuda12", (2, 58, 0)), (" v2.56", (2, 56)),
    ("2.56.0", (2, 56, 0)), ("rc-2.56.0", None), ("", None),
])
def test_a_generic_version_is_its_numbers_whatever_follows(text, parsed):
    assert parse_generic_version(text) == parsed


@pytest.mark.parametrize("version,minimum,ok", [
    ((2, 56), (2, 56, 0), True), ((2, 55, 9), (2, 56, 0), False), ((2, 56, 0, 1), (2, 56, 0), True),
    ((3, 0), (2, 56, 0), True), ((2, 100), (2, 56, 0), True),
])
def test_versions_compare_component_by_component_a_missing_one_being_zero(version, minimum, ok):
    assert at_least(version, minimum) is ok


# IsQualifiedName: a '/' needs a non-empty DNS-1123 subdomain prefix of at most 253 characters before it.
@pytest.mark.parametrize("key,ok", [("/team", False), ("ray.io/", False), ("a/team", True),
                                    ("a" * 253 + "/x", True), ("a" * 254 + "/x", False)])
def test_a_label_keys_prefix_is_a_non_empty_dns_subdomain(key, ok):
    assert is_qualified_name(key) is ok
