"""tools/watch.py's paths no other test of the module ran: a missing RayJob, an unreadable submitter log, hang dumps,
the GPU nodes' readiness line built from the kube-system pods on each node, the report's refusal, main's one-line
errors, and the measured bill when EC2 cannot be read."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from stacks.context import settings_from_files
from tests.conftest import ROOT
from tests.infra.test_cluster_status import load
from tests.infra.test_watch_wiring import seen  # noqa: F401 - the fixture faking the stack, the API and the bill
from tools import watch
from tools.bill import NodeRecorder


class _Jobs:
    def __init__(self, status=None, rayjob=None, log=None):
        self.status, self.rayjob, self.log = status, rayjob, log

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        if self.status:
            raise ApiException(status=self.status, reason="Not Found" if self.status == 404 else "Server Error")
        return self.rayjob

    def list_namespaced_pod(self, namespace, label_selector=None):
        meta = type("Meta", (), {"name": "ft-1-abc", "creation_timestamp": 1})()
        return type("PodList", (), {"items": [type("Pod", (), {"metadata": meta})()]})()

    def read_namespaced_pod_log(self, name, namespace):
        if self.log is None:
            raise ApiException(status=400, reason="container not started")
        return self.log


def _follow(monkeypatch, api, **kw):
    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: api)
    monkeypatch.setattr(client, "CoreV1Api", lambda _: api)
    monkeypatch.setattr(watch, "print_report", lambda run: None)
    monkeypatch.setattr(watch.time, "sleep", lambda s: None)
    return watch.follow_job(None, "training", "ft-1", "bucket", 15, kw.pop("timeout_s", 3600), **kw)


def _done(succeeded=True):
    rayjob = load("rayjob-running.json")
    rayjob["status"] |= {"jobDeploymentStatus": "Complete" if succeeded else "Failed",
                         "jobStatus": "SUCCEEDED" if succeeded else "FAILED"}
    return rayjob


def test_a_rayjob_that_is_gone_is_named_in_one_line(monkeypatch):
    with pytest.raises(watch.WatchError, match=r"^RayJob training/ft-1 does not exist"):
        _follow(monkeypatch, _Jobs(status=404))


def test_an_api_error_other_than_not_found_is_not_called_a_missing_job(monkeypatch):
    with pytest.raises(ApiException) as raised:
        _follow(monkeypatch, _Jobs(status=500))
    assert raised.value.status == 500


def test_an_unstarted_submitter_container_does_not_stop_the_watch(monkeypatch, capsys):
    assert _follow(monkeypatch, _Jobs(rayjob=_done(), log=None)) is True


def test_a_failed_job_returns_false(monkeypatch):
    assert _follow(monkeypatch, _Jobs(rayjob=_done(succeeded=False), log="")) is False


def test_the_hang_dumps_folder_the_watchdog_names_is_printed(monkeypatch, capsys):
    from training.watchdog import LINE_PREFIX

    log = f"{LINE_PREFIX} rank 1 stuck in all_reduce; stacks in s3://bucket/runs/ft-1/hang-3\n"
    folders = watch.dump_folders(log.splitlines())
    assert folders, "the watchdog's line must name a folder"
    _follow(monkeypatch, _Jobs(rayjob=_done(succeeded=False), log=log))
    out = capsys.readouterr().out
    assert f"hang dumps: {folders[0]}/" in out


def test_a_running_job_is_given_up_after_its_timeout_and_progress_lines_are_printed(monkeypatch, capsys):
    calls = []
    assert _follow(monkeypatch, _Jobs(rayjob=load("rayjob-running.json"), log="step 3/10 loss 2.0\n"), timeout_s=0,
                   progress=lambda: calls.append(1) or ["autoscaler: scale-up"]) is False
    out = capsys.readouterr().out
    assert calls == [1] and "autoscaler: scale-up" in out and "step 3/10 loss 2.0" in out


def _node(name, ready=True, gpus="4", efa="1"):
    return {"metadata": {"name": name, "creationTimestamp": "2026-12-01T09:00:00Z"},
            "spec": {"providerID": f"aws:///us-east-2a/i-{name}"},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": "2026-12-01T09:02:00Z"}],
                       "allocatable": {"nvidia.com/gpu": gpus, "vpc.amazonaws.com/efa": efa}}}


class _Core:
    def __init__(self, nodes, kube_system_pods):
        self.nodes, self.kube_system_pods = nodes, kube_system_pods

    def list_namespaced_event(self, namespace):
        return type("L", (), {"items": []})()

    def list_namespaced_pod(self, namespace):
        return {"items": self.kube_system_pods if namespace == "kube-system" else []}

    def list_node(self, label_selector):
        return type("L", (), {"items": self.nodes})()


class _Api:
    def sanitize_for_serialization(self, obj):
        return obj


def _reporter(monkeypatch, nodes, pods, recorder=None, pending_check=None):
    monkeypatch.setattr(client, "CoreV1Api", lambda _: _Core(nodes, pods))
    s = settings_from_files(ROOT / "cdk.json", [])
    return watch.progress_reporter(_Api(), s, "training", recorder, pending_check)


def test_a_node_missing_efa_is_told_whether_its_own_plugin_pod_runs(monkeypatch):
    # The hint depends on the kube-system pods scheduled on THAT node: the EFA plugin runs on gpu-a only.
    pods = [{"metadata": {"name": "efa-k8s-device-plugin-x1"}, "spec": {"nodeName": "gpu-a"}}]
    lines = _reporter(monkeypatch, [_node("gpu-a", efa="0"), _node("gpu-b", efa="0")], pods)()
    assert "gpu-a: vpc.amazonaws.com/efa 0 of 1 allocatable: its plugin pod runs but has not registered them yet" in lines
    assert ("gpu-b: vpc.amazonaws.com/efa 0 of 1 allocatable: the EFA device plugin has no pod on this node "
            "(taint toleration, node selector or allowlist?)") in lines


def test_ready_nodes_are_announced_once_and_recorded_for_the_bill(monkeypatch):
    recorder, pending = NodeRecorder(), []
    report = _reporter(monkeypatch, [_node("gpu-a"), _node("gpu-b")], [], recorder, lambda: pending.append(1))
    assert report() == ["all 2 GPU node(s) ready: gpu-a (4 GPU, 1 EFA), gpu-b (4 GPU, 1 EFA)"]
    assert report() == []
    assert sorted(recorder.nodes) == ["gpu-a", "gpu-b"] and recorder.nodes["gpu-a"].instance_id == "i-gpu-a"
    assert pending == [1, 1]


def test_one_node_short_of_the_node_count_is_said(monkeypatch):
    assert _reporter(monkeypatch, [_node("gpu-a")], [])() == ["1 of 2 GPU nodes have joined the cluster"]


def test_a_report_that_cannot_be_made_is_said_in_one_line(monkeypatch, capsys):
    from tools import report

    def refuse(run):
        raise report.ReportError("no metrics under s3://b/runs/x")

    monkeypatch.setattr(report, "report", refuse)
    watch.print_report("s3://b/runs/x")
    assert capsys.readouterr().out == "no report: no metrics under s3://b/runs/x\n"


def test_no_run_folder_prints_no_report(monkeypatch, capsys):
    from tools import report

    monkeypatch.setattr(report, "report", lambda run: pytest.fail("no run, no report"))
    watch.print_report(None)
    assert capsys.readouterr().out == ""


def _main_raising(monkeypatch, error) -> int:
    def fail(*args):
        raise error

    monkeypatch.setattr(watch, "follow_job", fail)
    return watch.main(["--cdk-json", str(ROOT / "cdk.json")])


def test_no_credentials_says_how_to_log_in(seen, monkeypatch, capsys):  # noqa: F811
    from botocore.exceptions import NoCredentialsError

    assert _main_raising(monkeypatch, NoCredentialsError()) == 2
    assert capsys.readouterr().err.startswith("error: no AWS credentials found; run `aws configure`")


def test_a_missing_stack_output_is_named(seen, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setattr(watch, "stack_outputs", lambda session, s: {"ClusterName": "c1", "Namespace": "ns"})
    assert watch.main(["--cdk-json", str(ROOT / "cdk.json")]) == 2
    assert capsys.readouterr().err.startswith("error: the stack has no output 'RayJobName'; deploy this version")


def test_another_kubernetes_error_gives_its_status_and_reason(seen, monkeypatch, capsys):  # noqa: F811
    assert _main_raising(monkeypatch, ApiException(status=500, reason="Internal")) == 2
    assert capsys.readouterr().err == "error: Kubernetes API: 500 Internal\n"


def test_ctrl_c_says_the_job_goes_on_and_still_prints_the_bill(seen, monkeypatch, capsys):  # noqa: F811
    assert _main_raising(monkeypatch, KeyboardInterrupt()) == 2
    captured = capsys.readouterr()
    assert "stopped watching; the job goes on" in captured.err and "billing" in captured.out


class _Ec2Session:
    def __init__(self, ec2):
        self.ec2 = ec2

    def client(self, service, region_name=None):
        return self.ec2


def _recorder():
    recorder = NodeRecorder()
    recorder.observe([_node("gpu-a")], [], watch.datetime.now(watch.timezone.utc))
    return recorder


def test_an_unreadable_ec2_gives_a_one_line_measured_bill(monkeypatch):
    from botocore.exceptions import ClientError

    def refuse(*args):
        raise ClientError({"Error": {"Code": "UnauthorizedOperation", "Message": "no"}}, "DescribeInstances")

    monkeypatch.setattr(watch.bill, "instance_lives", refuse)
    s = settings_from_files(ROOT / "cdk.json", [])
    line = watch.measured_bill_line(_Ec2Session(None), s, _recorder(), {}, {})
    assert line.startswith("measured GPU bill: EC2 unreadable (An error occurred (UnauthorizedOperation)")


def test_unreadable_spot_prices_fall_back_to_on_demand_and_a_summary_that_cannot_be_written_is_said(monkeypatch, capsys):
    from botocore.exceptions import ClientError

    def refuse(*args):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "Op")

    priced = {}
    monkeypatch.setattr(watch.bill, "instance_lives", lambda ec2, ids, pending: {"ids": ids})
    monkeypatch.setattr(watch.bill, "spot_hour_prices", refuse)
    monkeypatch.setattr(watch.bill, "measure", lambda records, lives, end, prices, now, spot: priced.update(
        spot=spot, lives=lives, g6=prices["g6.12xlarge"]) or "measured")
    monkeypatch.setattr(watch.bill, "summary", lambda measured, estimate: {})
    monkeypatch.setattr(watch.bill, "add_to_run_summary", refuse)
    monkeypatch.setattr(watch.bill, "bill_line", lambda measured, estimate: "the bill")
    s = settings_from_files(ROOT / "cdk.json", [])
    assert watch.measured_bill_line(_Ec2Session(None), s, _recorder(), {}, {"run": "s3://b/runs/x"}) == "the bill"
    out = capsys.readouterr().out
    assert "(spot price history unreadable, spot nodes priced at on-demand" in out
    assert "(bill not written into the run summary" in out
    assert priced["spot"] == {} and priced["lives"] == {"ids": ["i-gpu-a"]}
    assert priced["g6"] == pytest.approx(4.6016)


def test_job_is_over_reads_the_named_rayjob_and_kuberays_terminal_states(monkeypatch):
    asked = []

    class Custom:
        def get_namespaced_custom_object(self, *args):
            asked.append(args)
            return _done(succeeded=False)

    monkeypatch.setattr(client, "CustomObjectsApi", lambda _: Custom())
    assert watch.job_is_over(None, "training", "ft-1") is True
    assert asked == [("ray.io", "v1", "training", "rayjobs", "ft-1")]
    monkeypatch.setattr(Custom, "get_namespaced_custom_object", lambda self, *args: load("rayjob-running.json"))
    assert watch.job_is_over(None, "training", "ft-1") is False


def test_main_notes_pending_instances_of_its_cluster_and_prints_the_measured_bill(seen, monkeypatch, capsys):  # noqa: F811
    # The reporter main builds gets the recorder and a pending check bound to the stack's cluster and EC2 in its region.
    reporters, sightings = [], []
    monkeypatch.setattr(watch, "progress_reporter", lambda *args: reporters.append(args) or "reporter")
    monkeypatch.setattr(watch.bill, "pending_sightings", lambda ec2, cluster, pending, now: sightings.append(
        (ec2, cluster, pending)))
    assert watch.main(["--cdk-json", str(ROOT / "cdk.json")]) == 0
    [(api, s, namespace, recorder, pending_check)] = reporters
    assert (api, namespace) == ("api", "ns")
    pending_check()
    assert sightings == [("ec2@us-east-2", "c1", {})]
    assert capsys.readouterr().out.splitlines()[-1] == "billing"  # no GPU node recorded: no measured bill
    recorder.observe([_node("gpu-a")], [], watch.datetime.now(watch.timezone.utc))
    monkeypatch.setattr(watch, "NodeRecorder", lambda: recorder)
    watch.main(["--cdk-json", str(ROOT / "cdk.json")])
    assert capsys.readouterr().out.splitlines()[-2:] == ["billing", "measured"]
