"""`python -m tools.seams cdk.out`, as `make synth` runs it after `cdk synth`."""

from __future__ import annotations

import json

from tools.seams.__main__ import main

BROKEN = {"Resources": {
    "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "demo"}},
    "Template": {"Type": "AWS::EC2::LaunchTemplate", "Properties": {"LaunchTemplateData": {
        "NetworkInterfaces": [{"DeviceIndex": 0, "InterfaceType": "efa"}]}}},
    "NodeRole": {"Type": "AWS::IAM::Role", "Properties": {
        "AssumeRolePolicyDocument": {"Statement": []},
        "ManagedPolicyArns": ["arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"]}},
    "Gpu": {"Type": "AWS::EKS::Nodegroup", "Properties": {
        "ClusterName": {"Ref": "Cluster"}, "NodeRole": {"Fn::GetAtt": ["NodeRole", "Arn"]},
        "InstanceTypes": ["g6.12xlarge"], "LaunchTemplate": {"Id": {"Ref": "Template"}}}}}}


def test_a_broken_seam_fails_with_one_line_naming_it(tmp_path, capsys):
    (tmp_path / "Stack.template.json").write_text(json.dumps(BROKEN))
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("Stack.template.json: node: Gpu: EFA pods need an unlimited memlock")
    assert err[-1].startswith("seams: 1 broken")


def test_a_clean_template_passes(tmp_path, capsys):
    clean = json.loads(json.dumps(BROKEN))
    clean["Resources"]["Template"]["Properties"]["LaunchTemplateData"]["NetworkInterfaces"][0]["InterfaceType"] = "interface"
    (tmp_path / "Stack.template.json").write_text(json.dumps(clean))
    assert main([str(tmp_path)]) == 0
    assert "checks pass for 1 template(s)" in capsys.readouterr().out


def test_an_unmodelled_type_stops_the_check_with_its_name(tmp_path, capsys):
    odd = json.loads(json.dumps(BROKEN))
    odd["Resources"]["Gpu"]["Properties"]["ClusterName"] = {"Ref": "Thing"}
    odd["Resources"]["Thing"] = {"Type": "AWS::Foo::Bar"}
    (tmp_path / "Stack.template.json").write_text(json.dumps(odd))
    assert main([str(tmp_path)]) == 2
    assert "Thing: no Ref return value known for AWS::Foo::Bar" in capsys.readouterr().err


def test_no_template_is_an_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no *.template.json" in capsys.readouterr().err
