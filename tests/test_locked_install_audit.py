"""tools/locked_install.py: the lock's line format, and the closure of a package named with and without an extra."""

from __future__ import annotations

import pytest

from tools import locked_install


def test_a_lock_line_with_anything_after_its_after_is_refused(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("aws-cdk-lib==2.275.0  # synth 300 MB, after aws-cdk.cloud-assembly-schema\n")
    assert locked_install.read_lock(lock)[0].after == "aws-cdk.cloud-assembly-schema"
    lock.write_text("aws-cdk-lib==2.275.0  # synth 300 MB, after aws-cdk.cloud-assembly-schema and more\n")
    with pytest.raises(ValueError, match=r"lock.txt:1: expected 'name==version  # synth\|dev N MB\[, after NAME\]'"):
        locked_install.read_lock(lock)


@pytest.mark.parametrize("lines", [["moto", "moto[apigatewayv2]"], ["moto[apigatewayv2]", "moto"]])
def test_a_package_named_with_and_without_an_extra_pulls_in_both(tmp_path, lines):
    # moto's apigatewayv2 extra requires openapi-spec-validator; moto itself requires boto3 (its metadata, as pip reads
    # it): whichever line comes first, both are in the closure.
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("\n".join(lines) + "\n")
    found = locked_install.closure(requirements)
    assert {"moto", "boto3", "openapi-spec-validator"} <= set(found)
