"""Shared pieces of the lifecycle integration tests: hand-made Volcano Jobs without the completion
policy, the classic layout (workers as batch/v1 Jobs + parameter servers as a Deployment), and a
bound log PVC."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from kubernetes import client

from tests.cluster import behaviour
from tests.integration.waiting import wait_for

VOLCANO = ("batch.volcano.sh", "v1alpha1")
STORAGE_CLASS = "vpipe-test-manual"


def volcano_job(name: str, namespace: str, *, ps: int = 1, workers: int = 2, labels: dict[str, str] | None = None,
                worker_labels: dict[str, str] | None = None, policies: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Volcano Job written by hand, as teams without vpipe write them: no TaskCompleted ->
    CompleteJob policy, so its parameter servers run forever once the workers are done."""
    def task(task_name: str, replicas: int, extra: dict[str, str] | None) -> dict[str, Any]:
        return {"name": task_name, "replicas": replicas, "minAvailable": replicas, "template": {
            "metadata": {"labels": {**(labels or {}), **(extra or {})}},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "tf", "image": "tensorflow/tensorflow:2.16.1", "command": ["python3", "train.py"],
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}}}
    spec: dict[str, Any] = {"schedulerName": "volcano", "queue": "default", "minAvailable": ps + workers,
                            "tasks": [task("ps", ps, None), task("worker", workers, worker_labels)]}
    if policies:
        spec["policies"] = policies
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}


class Cluster:
    """The admin's view of one namespace, for setting up and checking."""

    def __init__(self, cluster: Any, namespace: str) -> None:
        api = cluster.api_client()
        self.kubeconfig = cluster.kubeconfig
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.networking = client.NetworkingV1Api(api)

    def create_job(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.custom.create_namespaced_custom_object(*VOLCANO, self.namespace, "jobs", body)

    def job(self, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(*VOLCANO, self.namespace, "jobs", name)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def phase(self, name: str) -> str | None:
        return ((self.job(name) or {}).get("status") or {}).get("state", {}).get("phase")

    def pods(self, selector: str = "") -> dict[str, str]:
        """name -> phase ('Deleting' when a deletion is under way)."""
        out = {}
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
            out[pod.metadata.name] = "Deleting" if pod.metadata.deletion_timestamp else pod.status.phase
        return out

    def job_pods(self, job: str) -> dict[str, str]:
        return self.pods(f"volcano.sh/job-name={job}")

    def workers_done(self, job: str, workers: int = 2) -> bool:
        pods = self.job_pods(job)
        return sum(phase == "Succeeded" for name, phase in pods.items() if "-worker-" in name) == workers

    def events(self, name: str) -> list[Any]:
        return [e for e in self.core.list_namespaced_event(self.namespace).items if e.involved_object.name == name
                and (e.source.component if e.source else None) == "volcano-pipelines"]

    def explain(self) -> str:
        lines = [f"job {j['metadata']['name']}: {j.get('status', {}).get('state')}"
                 for j in self.custom.list_namespaced_custom_object(*VOLCANO, self.namespace, "jobs")["items"]]
        lines += [f"pod {n}: {p}" for n, p in self.pods().items()]
        lines += [f"deployment {d.metadata.name}: spec {d.spec.replicas} status {d.status.replicas}"
                  for d in self.apps.list_namespaced_deployment(self.namespace).items]
        return "\n".join(lines)

    # ----- the classic layout -----------------------------------------------------------------

    def classic(self, name: str, labels: dict[str, str], *, workers: int = 2, fail: bool = False,
                run_for: int | None = None) -> None:
        """`workers` batch/v1 Jobs that kwok completes (or fails) and one parameter server
        Deployment that stays Running; every object and pod carries `labels`."""
        pod_labels = {**labels, behaviour.TASK_SPEC_LABEL: "worker"}  # kwok completes "worker" pods
        if fail:
            pod_labels.update(behaviour.fail_with(4))
        if run_for:
            pod_labels.update(behaviour.run_for(run_for))
        container = {"name": "tf", "image": "tensorflow/tensorflow:2.16.1", "command": ["python3", "train.py"]}
        for i in range(workers):
            self.batch.create_namespaced_job(self.namespace, {
                "metadata": {"name": f"{name}-worker-{i}", "labels": labels},
                "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": pod_labels},
                                                         "spec": {"restartPolicy": "Never", "containers": [container]}}}})
        ps_labels = {**labels, "vpipe-test/role": f"{name}-ps"}
        self.apps.create_namespaced_deployment(self.namespace, {
            "metadata": {"name": f"{name}-ps", "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"vpipe-test/role": f"{name}-ps"}},
                     "template": {"metadata": {"labels": ps_labels}, "spec": {"containers": [container]}}}})

    def batch_jobs_complete(self, name: str, workers: int = 2) -> bool:
        jobs = [self.batch.read_namespaced_job(f"{name}-worker-{i}", self.namespace) for i in range(workers)]
        return all(any(c.type == "Complete" and c.status == "True" for c in (j.status.conditions or [])) for j in jobs)

    def replicas(self, deployment: str) -> int | None:
        try:
            return self.apps.read_namespaced_deployment(deployment, self.namespace).spec.replicas
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise


def make_log_pvc(cluster: Any, namespace: str, name: str = "logs") -> Iterator[str]:
    """A PVC bound to a hostPath PV made for it (the PV is cluster-scoped: removed after)."""
    core = client.CoreV1Api(cluster.api_client())
    pv = f"vpipe-{uuid.uuid4().hex[:10]}"
    core.create_persistent_volume({"metadata": {"name": pv}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": STORAGE_CLASS,
        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{pv}"},
        "claimRef": {"namespace": namespace, "name": name}}})
    try:
        core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": name}, "spec": {
            "accessModes": ["ReadWriteMany"], "storageClassName": STORAGE_CLASS, "volumeName": pv,
            "resources": {"requests": {"storage": "1Gi"}}}})
        wait_for(f"PVC {name} bound", lambda: core.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound",
                 timeout=60)
        yield name
    finally:
        core.delete_persistent_volume(pv)
