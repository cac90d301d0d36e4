"""The trainer's options: every refusal of training/config.py fires, as one line naming the option,
and `check_inputs` (training/inputs.py) finds a missing model or data before Ray starts."""

from __future__ import annotations

import json
import re

import pytest

from training.command_line import parse_args
from training.config import MAX_STEPS, ConfigError, TrainConfig
from training.config_rules import validate
from training.inputs import check_inputs
from training.train import main
from tests.conftest import fake_aws_credentials

REFUSED = [
    (["--node-wait-s", "-2"], r"--node-wait-s: -2 must be -1 \(no limit\) or between 0 and 604800"),
    (["--node-wait-s", "604801"], r"--node-wait-s: 604801 must be -1 \(no limit\) or between 0 and 604800"),
    (["--steps", "0"], r"--steps: 0 must be between 1 and 10,000,000"),
    (["--steps", "-3"], r"--steps: -3 must be between 1 and"),
    (["--steps", str(MAX_STEPS + 1)], r"--steps: 10000001 must be between 1 and 10,000,000"),
    (["--steps", "ten"], r"--steps: 'ten' is not an integer"),
    (["--seq-len", "4"], r"--seq-len: 4 must be between 8 and 131072"),
    (["--seq-len", "200000"], r"--seq-len: 200000 must be between 8 and 131072"),
    (["--model", "tiny", "--seq-len", "8192"], r"--seq-len: 8192 exceeds tiny's 4096 positions"),
    (["--model", "Qwen/Qwen2.5-1.5B", "--seq-len", "65536"], r"--seq-len: 65536 exceeds Qwen/Qwen2.5-1.5B's 32768 positions"),
    (["--micro-batch", "0"], r"--micro-batch: 0 must be between 1 and 4096"),
    (["--micro-batch", "5000"], r"--micro-batch: 5000 must be between 1 and 4096"),
    (["--grad-accum", "0"], r"--grad-accum: 0 must be between 1 and 65536"),
    (["--lr", "0"], r"--lr: 0.0 must be in \(0, 1\)"),
    (["--lr", "1.5"], r"--lr: 1.5 must be in \(0, 1\)"),
    (["--lr", "fast"], r"--lr: 'fast' is not a number"),
    (["--min-lr-ratio", "2"], r"--min-lr-ratio: 2.0 must be in \[0, 1\]"),
    (["--warmup-steps", "-1"], r"--warmup-steps: -1 must be between 0 and"),
    (["--weight-decay", "-0.1"], r"--weight-decay: -0.1 must be in \[0, 1\)"),
    (["--grad-clip", "-1"], r"--grad-clip: -1.0 must be 0 or more"),
    (["--steps", "10", "--checkpoint-every", "20"], r"--checkpoint-every: 20 must be between 0 \(only at the end\) and the number of steps \(10\)"),
    (["--checkpoint-every", "-1"], r"--checkpoint-every: -1 must be between 0"),
    (["--max-failures", "-2"], r"--max-failures: -2 must be -1 \(unlimited\) or between 0 and 1000"),
    (["--loss-chunk-tokens", "0"], r"--loss-chunk-tokens: 0 must be between 1 and"),
    (["--profile", "a100"], r"--profile: 'a100' is not one of h200, l4"),
    (["--attention", "eager"], r"--attention: 'eager' must be one of auto, sdpa, flex"),
    (["--workers", "0"], r"--workers: 0 must be between 1 and 4096"),
    (["--log-every", "0"], r"--log-every: 0 must be between 1 and"),
    (["--peak-tflops", "0"], r"--peak-tflops: 0.0 must be above 0 and below 100,000"),
    (["--run-name", "a b"], r"--run-name: 'a b' must start with a letter"),
    (["--run-name", ".."], r"--run-name: '..' must start with a letter"),
    (["--run-name", "run..x"], r"--run-name: 'run..x' .* \(no '..'\)"),
    (["--run-name", ".hidden"], r"--run-name: '.hidden' must start with a letter"),
    (["--run-name", "a/../../etc"], r"--run-name: 'a/../../etc' must start"),
    (["--model", "gpt-17"], r"--model: 'gpt-17' is not a built-in"),
    (["--model", "org/name; rm -rf /"], r"--model: 'org/name; rm -rf /' is not a built-in"),
    (["--model", "s3://Bad_Bucket/m"], r"--model: 's3://Bad_Bucket/m' must be s3://bucket/prefix with a valid bucket name"),
    (["--storage-path", "gs://bucket/x"], r"--storage-path: 'gs://bucket/x' must be a local path, file:// or s3://bucket/prefix"),
    (["--storage-path", "s3://"], r"--storage-path: 's3://' must be s3://bucket/prefix"),
    (["--storage-path", "file://relative"], r"--storage-path: 'file://relative' must be an absolute file:///path"),
    (["--storage-path", "/runs dir"], r"--storage-path: '/runs dir' may hold only"),
    (["--data", "hdfs://x/y.jsonl"], r"--data: 'hdfs://x/y.jsonl' must be a local path, file:// or s3://bucket/prefix"),
    (["--data", "/x/train.csv"], r"--data: '/x/train.csv' must be random, pattern, hf:org/name\[:split\], a .jsonl/.json/.parquet file"),
    (["--data", "/x/train.jsonl"], r"--data: real data needs a tokenizer; --model tiny is a built-in config without one"),
    (["--data", "hf:justaname"], r"--data: 'hf:justaname' must be hf:org/name\[@revision\]\[:config\]:split or hf:/folder\[:split\]"),
    (["--data", "hf:org/name:tr ain"], r"--data: 'hf:org/name:tr ain' must be hf:org/name"),
    (["--data", "hf:org/na--me"], r"--data: 'hf:org/na--me' must be hf:org/name"),
    (["--data", "hf:/x/$(id)"], r"--data: '/x/\$\(id\)' may hold only"),
    (["--model", "o/m", "--data", "/x/a.jsonl", "--val-data", "/x/b.csv"], r"--val-data: '/x/b.csv' must be random, pattern"),
    (["--val-data", "/x/b.jsonl"], r"--val-data: synthetic --data pattern has its own held-out stream; use --val-fraction"),
    (["--model", "o/m", "--data", "/x/a.jsonl", "--val-data", "/x/b.jsonl", "--val-fraction", "0.1"],
     r"--val-fraction: 0.1 and --val-data are exclusive"),
    (["--val-fraction", "0.6"], r"--val-fraction: 0.6 must be in \[0, 0.5\]"),
    (["--val-fraction", "-0.1"], r"--val-fraction: -0.1 must be in \[0, 0.5\]"),
    (["--steps", "10", "--val-fraction", "0.1", "--eval-every", "11"], r"--eval-every: 11 must be between 0 \(only at the end\) and the number of steps \(10\)"),
    (["--eval-every", "5"], r"--eval-every: 5 needs --val-data or --val-fraction"),
    (["--eval-batches", "0"], r"--eval-batches: 0 must be between 1 and 65536"),
    (["--messages-field", "1x"], r"--messages-field: '1x' must be a field name"),
    (["--prompt-field", "a,b c", "--response-field", "r"], r"--prompt-field: 'a,b c' must be field names separated by commas"),
    (["--prompt-field", "instruction"], r"--prompt-field and --response-field: give both \(instruction data\) or neither"),
    (["--response-field", "output"], r"--prompt-field and --response-field: give both"),
    (["--data", "/x/$(id).jsonl"], r"--data: .* may hold only letters, digits"),
    (["--text-field", "a.b"], r"--text-field: 'a.b' must be a field name"),
    (["--cache-dir", "s3://bucket/cache"], r"--cache-dir: 's3://bucket/cache' must be a local path$"),
    (["--inject-failure-at-step", "9", "--steps", "5"], r"--inject-failure-at-step: 9 must be between 1 and the number of steps \(5\)"),
    (["--no-such-option", "1"], r"unrecognized arguments: --no-such-option 1"),
    # activation checkpointing and auto
    (["--micro-batch", "many"], r"^--micro-batch: 'many' is not an integer or auto$"),
    (["--activation-checkpointing", "sometimes"],
     r"^--activation-checkpointing: 'sometimes' must be one of none, selective, full, auto$"),
    (["--micro-batch", "auto"], r"^--micro-batch: auto needs --batch-tokens \(the batch it splits into micro-batches; "
     r"the optimisation keeps it\)$"),
    # auto splits each worker's whole sequences: 65,536 tokens over 3 workers of 2,048-token sequences do not divide.
    (["--micro-batch", "auto", "--batch-tokens", "65536", "--workers", "3", "--seq-len", "2048"],
     r"^--batch-tokens: 65,536 is not a multiple of 3 workers \(--workers\) x 1 sequences \(--micro-batch\) x 2,048"),
    # argparse's own errors, reworded to lead with the option
    (["--steps", "ten"], r"^--steps: 'ten' is not an integer$"),
    (["--lr", "fast"], r"^--lr: 'fast' is not a number$"),
    (["--steps"], r"^--steps: expected one argument$"),
]


@pytest.mark.parametrize("argv,message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refusal_is_one_line_naming_the_option(argv, message):
    with pytest.raises(ConfigError, match=message) as error:
        parse_args(argv)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("argv", [
    ["--model", "qwen2.5-1.5b", "--seq-len", "32768"],
    ["--model", "./models/mine", "--data", "s3://my-bucket/data/"],
    ["--model", "o/m", "--run-name", "ft-0123456789", "--storage-path", "s3://my.bucket-1/runs", "--data", "file:///data/train.parquet"],
    ["--steps", "5", "--warmup-steps", "10", "--max-failures", "-1"],
    ["--model", "o/m", "--data", "hf:HuggingFaceH4/ultrachat_200k:train_sft", "--val-data", "hf:HuggingFaceH4/ultrachat_200k:test_sft"],
    ["--model", "o/m", "--data", "hf:/data/alpaca", "--prompt-field", "instruction,input", "--response-field", "output",
     "--val-fraction", "0.5", "--eval-every", "5", "--steps", "5"],
    ["--val-fraction", "0.05", "--eval-every", "100", "--no-assistant-only-loss", "--no-async-checkpoint"],
])
def test_accepted(argv):
    parse_args(argv)


@pytest.mark.parametrize("changes,message", [
    # argparse offers no choices for these: the cluster's settings reach validate() directly
    ({"sharding": "ring"}, r"^--sharding: 'ring' must be one of auto, full, hybrid$"),
    ({"attention": "fast"}, r"^--attention: 'fast' must be one of auto, sdpa, flex$"),
    ({"reduce_dtype": "fp8"}, r"^--reduce-dtype: 'fp8' must be one of fp32, bf16$"),
])
def test_values_outside_the_choices_are_refused(changes, message):
    with pytest.raises(ConfigError, match=message):
        validate(TrainConfig(**changes))


# The ends of every range, and each spelling a path may take, are accepted: a guard tightened by one fails here.
EDGES_ACCEPTED = [
    {"steps": 1}, {"steps": MAX_STEPS, "checkpoint_every": 0}, {"model": "tiny", "seq_len": 8}, {"seq_len": 131072},
    {"micro_batch": 4096}, {"grad_accum": 65536}, {"min_lr_ratio": 0.0}, {"min_lr_ratio": 1.0},
    {"data": "hf:./data:train"}, {"data": "hf:../data"}, {"data": "hf:~/data"}, {"data": "/data/shards/"},
    {"data": "s3://bucket/x://y.jsonl"}, {"model": "~/models/m"}, {"model": "file:///models/m"},
    {"warmup_steps": 0}, {"warmup_steps": MAX_STEPS}, {"weight_decay": 0.0}, {"grad_clip": 0.0}, {"grad_clip": 0.5},
    {"steps": 10, "checkpoint_every": 10}, {"max_failures": 1000}, {"loss_chunk_tokens": 1}, {"loss_chunk_tokens": 1 << 20},
    {"workers": 1}, {"workers": 4096}, {"log_every": MAX_STEPS}, {"peak_tflops": 0.5},
    {"val_fraction": 0.1, "eval_batches": 1}, {"val_fraction": 0.1, "eval_batches": 65536},
    {"steps": 10, "inject_failure_at_step": 1}, {"steps": 10, "inject_failure_at_step": 10},
    {"run_name": "Run-1"}, {"model_revision": "main"}, {"model_revision": "Main"},
    {"data": "/data.v2/train"}, {"data": "train.jsonl"}, {"data": "/data/train.csv/"},  # a dotted folder, a bare file
]


@pytest.mark.parametrize("changes", EDGES_ACCEPTED, ids=[str(i) for i in range(len(EDGES_ACCEPTED))])
def test_the_ends_of_every_range_are_accepted(changes):
    validate(TrainConfig(**({"model": "o/m"} | changes)))


HUB_DATA = "must be hf:org/name[@revision][:config]:split or hf:/folder[:split] (a revision, config or split is letters, digits, '_', '.', '-')"
MODEL_FORMS = "is not a built-in (qwen2.5-1.5b, qwen2.5-7b, qwen2.5-14b, tiny), a hub id org/name, a path (/..., ./...) or s3://bucket/prefix"


@pytest.mark.parametrize("changes,message", [
    ({"lr": 1.0}, "--lr: 1.0 must be in (0, 1)"),
    ({"weight_decay": 1.0}, "--weight-decay: 1.0 must be in [0, 1)"),
    ({"data": "/data/train.jsonX"}, "--data: '/data/train.jsonX' must be random, pattern, hf:org/name[:split], a "
     ".jsonl/.json/.parquet file, or a folder of them"),
    ({"max_failures": 1001}, "--max-failures: 1001 must be -1 (unlimited) or between 0 and 1000"),
    ({"peak_tflops": 100000.5}, "--peak-tflops: 100000.5 must be above 0 and below 100,000"),
    ({"peak_tflops": 100000}, "--peak-tflops: 100000 must be above 0 and below 100,000"),
    ({"run_name": "bad name"}, "--run-name: 'bad name' must start with a letter, digit or '_' and hold only letters, "
     "digits, '.', '_' and '-' (no '..'), at most 128 characters"),
    ({"prompt_field": "a"}, "--prompt-field and --response-field: give both (instruction data) or neither"),
    ({"instance_type": "x1"}, "--instance-type: 'x1' is not an EC2 instance type name (family.size, e.g. g6.12xlarge)"),
    ({"predicted_step_seconds": 0.0}, "--predicted-step-seconds: 0.0 must be above 0"),
    ({"predicted_link_gbps": -3.0}, "--predicted-link-gbps: -3.0 must be above 0"),
    ({"watchdog_step_seconds": 0.0}, "--watchdog-step-seconds: 0.0 must be above 0"),
    ({"data": "hf:org/a..b"}, f"--data: 'hf:org/a..b' {HUB_DATA}"),
    ({"data": "hf:org/name:bad split"}, f"--data: 'hf:org/name:bad split' {HUB_DATA}"),
    ({"model": "org/a..b"}, f"--model: 'org/a..b' {MODEL_FORMS}"),
    ({"model": "org--x/m"}, f"--model: 'org--x/m' {MODEL_FORMS}"),
    ({"data": "s3://Bad_Bucket/x.jsonl"}, "--data: 's3://Bad_Bucket/x.jsonl' must be s3://bucket/prefix with a valid "
     "bucket name (3-63 lower-case letters, digits, '.' or '-')"),
])
def test_refusals_in_full(changes, message):
    with pytest.raises(ConfigError) as error:
        validate(TrainConfig(**({"model": "o/m"} | changes)))
    assert str(error.value) == message


def test_cli_prints_one_line_without_traceback(capsys):
    assert main(["--steps", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "error: --steps: -1 must be between 1 and 10,000,000"


def test_missing_local_model_is_refused_before_ray_starts(tmp_path, capsys):
    assert main(["--model", str(tmp_path / "nope"), "--local"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --model: '{tmp_path / 'nope'}' is not a folder with a config.json (a saved Hugging Face model)"


def test_missing_local_data_is_refused_before_ray_starts(tmp_path, capsys):
    assert main(["--model", "o/m", "--data", str(tmp_path / "train.jsonl"), "--local"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --data: '{tmp_path / 'train.jsonl'}' does not exist on this machine"


def test_local_model_shorter_than_seq_len_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    cfg = validate(TrainConfig(model=str(tmp_path), seq_len=1024))
    with pytest.raises(ConfigError, match=r"--seq-len: 1024 exceeds the model's 512 positions"):
        check_inputs(cfg)


@pytest.mark.parametrize("seq_len, refused", [(32768, False), (32769, True)])
def test_an_unknown_hub_models_positions_are_all_usable(monkeypatch, seq_len, refused):
    # A model with max_position_embeddings 32768 has positions 0..32767: a 32768-token sequence uses them all, one
    # more runs past them. The Hub's config.json is stood in for (no download in tests).
    import transformers

    from training.inputs import check_hub_positions

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained",
                        lambda model, **_: transformers.LlamaConfig(max_position_embeddings=32768))
    cfg = TrainConfig(model="org/unknown-model", seq_len=seq_len)
    if refused:
        with pytest.raises(ConfigError, match=r"^--seq-len: 32769 exceeds org/unknown-model's 32768 positions"):
            check_hub_positions(cfg)
    else:
        check_hub_positions(cfg)


def test_unreadable_model_config_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ConfigError, match=r"--model: .*config.json cannot be read"):
        check_inputs(validate(TrainConfig(model=str(tmp_path))))


@pytest.fixture
def s3(monkeypatch):
    import boto3
    from moto import mock_aws

    fake_aws_credentials(monkeypatch)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="data-bucket")
        yield client


def test_missing_s3_data_is_refused(s3):
    with pytest.raises(ConfigError, match=r"^--data: s3://data-bucket/missing.jsonl does not exist$"):
        check_inputs(validate(TrainConfig(model="o/m", data="s3://data-bucket/missing.jsonl")))


def test_s3_model_without_config_is_refused(s3):
    s3.put_object(Bucket="data-bucket", Key="models/m/tokenizer.json", Body=b"{}")
    with pytest.raises(ConfigError, match=r"^--model: s3://data-bucket/models/m/config.json does not exist$"):
        check_inputs(validate(TrainConfig(model="s3://data-bucket/models/m")))


def test_s3_data_folder_and_missing_bucket(s3):
    s3.put_object(Bucket="data-bucket", Key="data/part-0.parquet", Body=b"x")
    check_inputs(validate(TrainConfig(model="o/m", data="s3://data-bucket/data/")))
    with pytest.raises(ConfigError, match=r"^--data: cannot read s3://no-bucket/x.jsonl: .*NoSuchBucket"):
        check_inputs(validate(TrainConfig(model="o/m", data="s3://no-bucket/x.jsonl")))


@pytest.mark.parametrize("spelling", ["{tmp}/nope", "./nope", "../nope", "~/nope"])
def test_missing_local_hub_layout_folder_is_refused(tmp_path, monkeypatch, spelling):
    monkeypatch.chdir(tmp_path)
    folder = spelling.format(tmp=tmp_path)
    with pytest.raises(ConfigError, match=rf"^--data: '{re.escape(folder)}' does not exist on this machine$"):
        check_inputs(validate(TrainConfig(model="o/m", data=f"hf:{folder}:train")))


def test_hub_layout_folder_with_a_split_is_found(tmp_path):
    check_inputs(validate(TrainConfig(model="o/m", data=f"hf:{tmp_path}:train", val_data=f"hf:{tmp_path}:validation")))


def test_hub_id_is_left_to_the_download_and_the_validation_data_is_still_checked(tmp_path):
    check_inputs(validate(TrainConfig(model="o/m", data="hf:org/name:train")))
    with pytest.raises(ConfigError, match=rf"^--val-data: '{re.escape(str(tmp_path))}/val.jsonl' does not exist on this machine$"):
        check_inputs(validate(TrainConfig(model="o/m", data="hf:org/name:train", val_data=f"{tmp_path}/val.jsonl")))


def test_missing_relative_data_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^--data: 'data/train.jsonl' does not exist on this machine$"):
        check_inputs(validate(TrainConfig(model="o/m", data="data/train.jsonl")))


def test_file_uri_is_looked_up_as_a_local_path(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"text": "a"}\n')
    check_inputs(validate(TrainConfig(model="o/m", data=f"file://{tmp_path}/train.jsonl")))
    with pytest.raises(ConfigError, match=r"^--data: 'file://.*/missing.jsonl' does not exist on this machine$"):
        check_inputs(validate(TrainConfig(model="o/m", data=f"file://{tmp_path}/missing.jsonl")))


def test_local_model_exactly_as_long_as_seq_len_is_accepted(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 1024}))
    check_inputs(validate(TrainConfig(model=str(tmp_path), seq_len=1024)))


def test_s3_model_prefix_with_a_trailing_slash_finds_its_config(s3):
    s3.put_object(Bucket="data-bucket", Key="models/tinyX/config.json", Body=b"{}")
    check_inputs(validate(TrainConfig(model="s3://data-bucket/models/tinyX/")))


def test_validation_data_is_checked_after_s3_training_data(s3, tmp_path):
    s3.put_object(Bucket="data-bucket", Key="data/train.jsonl", Body=b"{}")
    with pytest.raises(ConfigError, match=r"^--val-data: '.*/val.jsonl' does not exist on this machine$"):
        check_inputs(validate(TrainConfig(model="o/m", data="s3://data-bucket/data/train.jsonl", val_data=f"{tmp_path}/val.jsonl")))


def test_present_inputs_pass(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 4096}))
    (tmp_path / "train.jsonl").write_text('{"text": "a"}\n')
    check_inputs(validate(TrainConfig(model=str(tmp_path), data=str(tmp_path / "train.jsonl"), seq_len=1024)))


@pytest.mark.parametrize("attention,data,device,kernel", [
    ("auto", "/d/chat.jsonl", "cuda", "flex_attention"), ("auto", "random", "cuda", "sdpa"),
    ("auto", "/d/chat.jsonl", "cpu", "sdpa"), ("sdpa", "/d/chat.jsonl", "cuda", "sdpa"), ("flex", "random", "cpu", "flex_attention"),
])
def test_attention_kernel(attention, data, device, kernel):
    import torch

    from training.model import attention_kernel

    cfg = validate(TrainConfig(model="o/m", attention=attention, data=data))
    assert attention_kernel(cfg, torch.device(device)) == kernel


def test_no_options_are_the_defaults():
    assert parse_args([]) == validate(TrainConfig())


def test_options_come_from_the_arguments_given_not_the_command_line(monkeypatch):
    monkeypatch.setattr("sys.argv", ["python", "--steps", "7", "--profile", "h200"])
    assert parse_args(["--steps", "5"]) == validate(TrainConfig(steps=5))


def test_every_option_is_documented():
    import dataclasses

    from training.command_line import _field_docs

    assert set(_field_docs()) == {f.name for f in dataclasses.fields(TrainConfig)}


def test_the_help_names_the_program_and_documents_each_option(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m training.train ")
    assert "\nFine-tune a causal LM with FSDP2 under Ray Train (laptop, GPU box or EKS).\n" in out
    assert "--steps STEPS " in out and "Optimizer steps. (default: 100)" in out
    assert "Write checkpoints in the background (training pauses only to copy the shards to CPU memory). (default: True)" in out


# ------------------------------------------------------------------ one global batch: --batch-tokens


@pytest.mark.parametrize("workers,accum", [(8, 4), (16, 2), (4, 8), (2, 16)])
def test_batch_tokens_sets_each_workers_accumulation(workers, accum):
    # 65,536 tokens per step = workers x 1 sequence x 2,048 tokens x accum: 8 x 4, 16 x 2, 4 x 8, 2 x 16.
    cfg = parse_args(["--batch-tokens", "65536", "--workers", str(workers), "--seq-len", "2048", "--micro-batch", "1"])
    assert cfg.grad_accum == accum and validate(cfg).grad_accum == accum


def test_batch_tokens_wins_over_a_profiles_accumulation():
    # The l4 profile's 4 micro-batches are per GPU; a batch of 65,536 on 2 workers at 1 x 2,048 needs 16.
    assert parse_args(["--profile", "l4", "--workers", "2", "--batch-tokens", "65536"]).grad_accum == 16


@pytest.mark.parametrize("argv,message", [
    # 3 workers x 1 x 2,048 = 6,144 tokens per round; 65,536 / 6,144 = 10.67, so 10 or 11 rounds.
    (["--batch-tokens", "65536", "--workers", "3", "--seq-len", "2048", "--micro-batch", "1"],
     r"^--batch-tokens: 65,536 is not a multiple of 3 workers \(--workers\) x 1 sequences \(--micro-batch\) x 2,048 "
     r"tokens \(--seq-len\) = 6,144 \(at most 65,536 times\); nearest valid: 61,440 or 67,584$"),
    (["--batch-tokens", "65536", "--grad-accum", "4"], r"^--grad-accum: 4 and --batch-tokens 65536 are exclusive"),
])
def test_a_batch_the_workers_cannot_split_is_refused_in_one_line(argv, message):
    with pytest.raises(ConfigError, match=message):
        parse_args(argv)


def test_an_accumulation_that_contradicts_the_batch_is_refused():
    with pytest.raises(ConfigError, match=r"^--grad-accum: 3 and --batch-tokens 65536 \(which gives 4 at 8 workers\)"):
        validate(TrainConfig(batch_tokens=65536, workers=8, seq_len=2048, micro_batch=1, grad_accum=3))


def test_tokens_per_step_count_every_micro_batch_of_the_step():
    """A worker's step is grad_accum micro-batches of micro_batch sequences of seq_len tokens:
    4 x 2048 x 8 = 65,536 tokens (what tok/s/GPU and MFU divide by the step time)."""
    assert TrainConfig(micro_batch=4, seq_len=2048, grad_accum=8).tokens_per_step_per_worker == 65_536


# ------------------------------------------------------------------ activation checkpointing and auto

@pytest.mark.parametrize("argv,expected", [
    ([], "none"),
    (["--activation-checkpointing", "selective"], "selective"),
    (["--activation-checkpointing", "full"], "full"),
    (["--activation-checkpointing"], "full"),            # the old boolean flag, bare
    (["--no-activation-checkpointing"], "none"),
    (["--activation-checkpointing", "true"], "full"),    # the old values, as cdk.json and -c carried them
    (["--activation-checkpointing", "false"], "none"),
    (["--profile", "l4"], "full"),
    (["--profile", "h200"], "none"),
])
def test_recomputation_is_none_selective_or_full_and_the_old_booleans_still_mean_full_and_none(argv, expected):
    assert parse_args(argv).activation_checkpointing == expected


def test_booleans_given_in_code_mean_full_and_none():
    """The benchmark's cases and recorded runs hand over True and False."""
    assert validate(TrainConfig(activation_checkpointing=True)).activation_checkpointing == "full"
    assert validate(TrainConfig(activation_checkpointing=False)).activation_checkpointing == "none"


DEFAULT_CLUSTER = ["--model", "Qwen/Qwen2.5-1.5B", "--instance-type", "g6.12xlarge", "--workers", "8", "--seq-len", "2048",
                   "--batch-tokens", "65536", "--loss-chunk-tokens", "2048", "--reduce-dtype", "bf16"]


def test_the_trainer_refuses_an_auto_only_the_planner_resolves(capsys):
    assert main(DEFAULT_CLUSTER + ["--micro-batch", "auto", "--activation-checkpointing", "auto", "--sharding", "hybrid"]) == 2
    assert capsys.readouterr().err == ("error: --micro-batch: auto needs the planner: run python -m planning.train "
                                       "with the same options, or set --micro-batch and --activation-checkpointing\n")


def test_the_trainer_refuses_precision_auto_unresolved(capsys):
    assert main(["--model", "tiny", "--workers", "2", "--local", "--precision", "auto"]) == 2
    assert capsys.readouterr().err == ("error: --precision: auto needs the planner: run python -m planning.train with "
                                       "the same options, or set --precision\n")


def test_sharding_auto_on_a_cluster_is_refused_and_on_one_machine_is_full(capsys):
    from training.driver import refuse_planner_autos
    from training.worker import choose_layout

    assert main(["--model", "tiny", "--workers", "8"]) == 2  # sharding defaults to auto
    assert capsys.readouterr().err == ("error: --sharding: auto needs the planner: run python -m planning.train with the "
                                       "same options, or set --sharding\n")
    local = parse_args(["--model", "tiny", "--workers", "2", "--local"])
    refuse_planner_autos(local)  # nothing to refuse
    assert choose_layout(local, ["node-a", "node-a"]) == ("full", 1, 2, "one machine")




def test_hybrid_sharding_replicates_over_the_nodes_and_shards_over_each_nodes_workers():
    """2 g6.12xlarge of 4 GPUs each: a replica per node, each layer sharded over that node's 4 GPUs (HSDP's mesh,
    (replicate, shard) = (nodes, GPUs per node)); FSDP's full sharding takes the 8 GPUs as one flat mesh."""
    from training.worker import choose_layout

    placement = ["node-a"] * 4 + ["node-b"] * 4
    hybrid = parse_args(["--model", "tiny", "--workers", "8", "--sharding", "hybrid"])
    assert choose_layout(hybrid, placement) == ("hybrid", 2, 4, "as set")
    full = parse_args(["--model", "tiny", "--workers", "8", "--sharding", "full"])
    assert choose_layout(full, placement) == ("full", 1, 8, "as set")


def test_the_run_summary_holds_the_last_steps_loss_and_the_last_validation(tmp_path):
    """Validated at steps 2 and 4 of 5: the summary's val_loss and val_ppl are step 4's (ppl = e^loss), its loss
    step 5's; a record past the step the run returned (a retry's leftover) is not read."""
    import math

    from training.driver import write_run_summary

    cfg = TrainConfig(storage_path=str(tmp_path), run_name="r")
    losses = {1: 6.0, 2: 5.0, 3: 4.5, 4: 4.0, 5: 3.5, 6: 9.9}
    validated = {2: 5.5, 4: 4.25}
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "loss": loss} | ({"val_loss": validated[s], "val_ppl": math.exp(validated[s])}
                                                if s in validated else {})) + "\n" for s, loss in losses.items()))
    summary = write_run_summary(cfg, {"step": 5}, started=0.0)
    assert (summary["final_loss"], summary["val_loss"]) == (3.5, 4.25)
    assert summary["val_ppl"] == pytest.approx(math.exp(4.25))
    assert json.loads((tmp_path / "r" / "run_summary.json").read_text())["val_loss"] == 4.25
