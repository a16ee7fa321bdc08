"""Running `vpipe train` against the test control plane and watching what it creates."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from kubernetes import client

from tests.helpers.vpipe import Run, start, vpipe


GROUP, VERSION = "batch.volcano.sh", "v1alpha1"
CODE_URL = "https://example.com/code/"  # never fetched: kwok runs no container
def _label_args(task: str, labels: dict[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in labels.items():
        args += ["--pod-label", f"{task}:{key}={value}"]
    return args


def _start(cluster: Any, *args: str) -> subprocess.Popen[str]:
    return start(cluster.kubeconfig, *args)


def _vpipe(cluster: Any, *args: str, timeout: float = 240) -> Run:
    return vpipe(cluster.kubeconfig, *args, timeout=timeout)


class Observer:
    """Polls the namespace while a step runs, remembering every pod it saw."""

    def __init__(self, cluster: Any, namespace: str) -> None:
        api = cluster.api_client()
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.pods: dict[str, Any] = {}  # last seen object per pod name
        self.phases: dict[str, set[str]] = {}
        self.uids: dict[str, set[str]] = {}  # pod name -> uids (a restarted job recreates pods)
        # Volcano's plugins delete their ConfigMaps / Secrets when the job ends: keep copies.
        self.config_maps: dict[str, dict[str, str]] = {}
        self.secrets: dict[str, dict[str, str]] = {}
        self.podgroups: dict[str, dict[str, Any]] = {}  # job name -> PodGroup (gone once the job ends)

    def poll(self) -> list[Any]:
        pods = self.core.list_namespaced_pod(self.namespace).items
        for pod in pods:
            name = pod.metadata.name
            self.pods[name] = pod
            self.phases.setdefault(name, set()).add(pod.status.phase)
            self.uids.setdefault(name, set()).add(pod.metadata.uid)
        for cm in self.core.list_namespaced_config_map(self.namespace).items:
            self.config_maps[cm.metadata.name] = cm.data or {}
        for secret in self.core.list_namespaced_secret(self.namespace).items:
            self.secrets[secret.metadata.name] = secret.data or {}
        groups = self.custom.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self.namespace, "podgroups")
        for group in groups["items"]:
            for ref in group["metadata"].get("ownerReferences", []):
                self.podgroups[ref["name"]] = group
        return pods

    def watch(self, proc: subprocess.Popen, timeout: float = 240) -> None:
        end = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < end:
            self.poll()
            time.sleep(0.2)

    def job(self, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "jobs", name)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def jobs(self) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "jobs")["items"]

    def explain(self) -> str:
        """What the cluster looks like, for a timeout message."""
        lines = []
        for job in self.jobs():
            state = job.get("status", {}).get("state", {})
            lines.append(f"job {job['metadata']['name']}: {state}")
        groups = self.custom.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self.namespace, "podgroups")
        for group in groups["items"]:
            status = group.get("status", {})
            lines.append(f"podgroup {group['metadata']['name']}: {status.get('phase')} {status.get('conditions')}")
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            lines.append(f"pod {pod.metadata.name}: {pod.status.phase} on {pod.spec.node_name}")
        queue = self.custom.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "default")
        lines.append(f"queue default: {queue.get('status')}")
        return "\n".join(lines)

    def pod_names(self) -> set[str]:
        return {p.metadata.name for p in self.core.list_namespaced_pod(self.namespace).items}
