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


REGISTRY = "111122223333.dkr.ecr.us-east-2.amazonaws.com"
BROKEN_EVERYWHERE = {"Resources": {
    **BROKEN["Resources"],
    # a node role without AmazonEKSWorkerNodePolicy: the Pod Identity agent's call is denied (IAM)
    "NodeRole": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {"Statement": []}}},
    # no instance type anywhere (capacity); MinSize 1 with an add-on not ordered after it (order)
    "Gpu": {"Type": "AWS::EKS::Nodegroup", "Properties": {
        "ClusterName": {"Ref": "Cluster"}, "NodeRole": {"Fn::GetAtt": ["NodeRole", "Arn"]},
        "LaunchTemplate": {"Id": {"Ref": "Template"}}, "ScalingConfig": {"MinSize": 1, "MaxSize": 1, "DesiredSize": 1}}},
    "Rule": {"Type": "AWS::ECR::PullThroughCacheRule", "Properties": {
        "EcrRepositoryPrefix": "ecr-public", "UpstreamRegistryUrl": "public.ecr.aws"}},
    # one image the rule serves (its import needs rights the node role lacks), one no rule serves (ECR)
    "Addon": {"Type": "AWS::EKS::Addon", "Properties": {
        "AddonName": "amazon-cloudwatch-observability", "ClusterName": {"Ref": "Cluster"},
        "ConfigurationValues": json.dumps({"a": f"{REGISTRY}/ecr-public/cw/agent:1", "b": f"{REGISTRY}/k8s/agent:1"})}},
    # a name the API server refuses (Kubernetes)
    "Manifest": {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": {
        "Manifest": json.dumps([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}])}}}}


def test_every_seam_is_checked(tmp_path, capsys):
    """One template broken at each seam: each reports its line (a seam left out of check_template fails here)."""
    (tmp_path / "Stack.template.json").write_text(json.dumps(BROKEN_EVERYWHERE))
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    seams = sorted(line.split(": ", 2)[1] for line in err[:-1])
    assert seams == ["ECR", "IAM", "IAM", "IAM", "Kubernetes", "capacity", "node", "order"]
    assert sum("calls ecr:BatchImportUpstreamImage" in line or "calls ecr:CreateRepository" in line for line in err) == 2
    assert sum("calls eks-auth:AssumeRoleForPodIdentity" in line for line in err) == 1
    assert err[-1].startswith("seams: 8 broken")


def test_only_synthesized_templates_are_read(tmp_path, capsys):
    # cdk.out also holds manifest.json, tree.json and asset folders: only *.template.json are stacks.
    clean = json.loads(json.dumps(BROKEN))
    clean["Resources"]["Template"]["Properties"]["LaunchTemplateData"]["NetworkInterfaces"][0]["InterfaceType"] = "interface"
    (tmp_path / "Stack.template.json").write_text(json.dumps(clean))
    (tmp_path / "manifest.json").write_text(json.dumps({"version": "41.0.0", "artifacts": {}}))
    (tmp_path / "tree.json").write_text("{}")
    assert main([str(tmp_path)]) == 0
    assert "checks pass for 1 template(s)" in capsys.readouterr().out


def test_a_broken_template_fails_the_check_whichever_template_is_read_last(tmp_path, capsys):
    # cdk.out holds one template per stack: a broken one fails the check even when a clean one sorts after it.
    clean = json.loads(json.dumps(BROKEN))
    clean["Resources"]["Template"]["Properties"]["LaunchTemplateData"]["NetworkInterfaces"][0]["InterfaceType"] = "interface"
    (tmp_path / "A.template.json").write_text(json.dumps(BROKEN))
    (tmp_path / "B.template.json").write_text(json.dumps(clean))
    (tmp_path / "C.template.json").write_text(json.dumps(BROKEN))
    assert main([str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err[:-1]] == ["A.template.json", "C.template.json"]
    assert err[-1].startswith("seams: 2 broken")
