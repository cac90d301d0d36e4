"""The stack's outputs, as the user copies them and as `make watch` / `make destroy` read them."""

from stacks.outputs import job_outputs


def test_each_output_is_the_command_or_name_for_this_job():
    # Worked example: KubeRay names the head Service <job>-head-svc (utils.go GenerateHeadServiceName) and the
    # submitter a Kubernetes Job named after the RayJob; the run's folder is runs/<run> in the bucket.
    assert job_outputs("eu-west-1", "MyCluster", "team-a", "fsdp-1a2b", "ckpt-bucket", "qwen-run-3") == {
        "Kubeconfig": "aws eks update-kubeconfig --region eu-west-1 --name MyCluster",
        "JobStatus": "kubectl -n team-a get rayjob fsdp-1a2b -o wide",
        "JobLogs": "kubectl -n team-a logs -f job/fsdp-1a2b",
        "Dashboard": "kubectl -n team-a port-forward service/fsdp-1a2b-head-svc 8265:8265",
        "CheckpointBucket": "ckpt-bucket",
        "RunPath": "s3://ckpt-bucket/runs/qwen-run-3",
        "ClusterName": "MyCluster",
        "Namespace": "team-a",
        "RayJobName": "fsdp-1a2b",
    }
