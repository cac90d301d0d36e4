"""The stack's outputs: how to follow the job, and what `make watch` and `make destroy` read
(ClusterName, Namespace, RayJobName, CheckpointBucket: tools/watch.py, tools/teardown.py)."""

from __future__ import annotations


def job_outputs(region: str, cluster_name: str, namespace: str, job: str, bucket: str, run: str) -> dict[str, str]:
    return {
        "Kubeconfig": f"aws eks update-kubeconfig --region {region} --name {cluster_name}",
        "JobStatus": f"kubectl -n {namespace} get rayjob {job} -o wide",
        "JobLogs": f"kubectl -n {namespace} logs -f job/{job}",
        # KubeRay names a RayJob's head Service after the job (utils.go GenerateHeadServiceName).
        "Dashboard": f"kubectl -n {namespace} port-forward service/{job}-head-svc 8265:8265",
        "CheckpointBucket": bucket,
        "RunPath": f"s3://{bucket}/runs/{run}",
        "ClusterName": cluster_name,
        "Namespace": namespace,
        "RayJobName": job,
    }
