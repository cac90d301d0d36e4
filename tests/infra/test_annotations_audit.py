"""cdk_constructs/annotations.py: the keys the RayJob carries and the review and the seams read back."""

from __future__ import annotations

import re

import pytest

from cdk_constructs import annotations

# Kubernetes' annotation key (apimachinery validation ValidateAnnotations -> IsQualifiedName): an optional DNS-1123
# subdomain prefix and '/', then a name of at most 63 characters, alphanumeric at both ends.
PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
KEYS = [annotations.AUTO_ANNOTATION, annotations.IMAGE_SOURCE_ANNOTATION]


@pytest.mark.parametrize("key", KEYS)
def test_each_key_is_a_qualified_name_the_api_server_accepts(key):
    prefix, _, name = key.rpartition("/")
    assert re.fullmatch(PREFIX, prefix) and len(prefix) <= 253 and re.fullmatch(NAME, name)


def test_the_keys_are_the_projects_own_and_distinct():
    # Jobs deployed by an earlier version are read back under these names: they are a contract, not a detail.
    assert KEYS == ["eks-fsdp-efa/auto", "eks-fsdp-efa/image-source"]
