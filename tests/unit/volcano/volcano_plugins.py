"""What Volcano v1.14's job plugins make of a rendered job, written from their source
(pkg/controllers/job/plugins/svc/svc.go GenerateHosts and OnPodCreate, ssh/ssh.go
generateSSHConfig), so that tests measure the real objects and environment, not our sums."""

from __future__ import annotations

from typing import Any


def pod_names(job: dict[str, Any]) -> dict[str, list[str]]:
    """Per task, its pods' names as Volcano makes them: `<job>-<task>-<index>`."""
    name = job["metadata"]["name"]
    return {t["name"]: [f"{name}-{t['name']}-{i}" for i in range(int(t["replicas"]))] for t in job["spec"]["tasks"]}


def svc_configmap(job: dict[str, Any]) -> dict[str, str]:
    """The svc plugin's ConfigMap data: per task `<key>.host` (newline-joined hosts),
    `VC_<KEY>_HOSTS` (comma-joined) and `VC_<KEY>_NUM`, the key being the task's name with
    '-' as '_'."""
    name = job["metadata"]["name"]
    data = {}
    for task, pods in pod_names(job).items():
        hosts = [f"{pod}.{name}" for pod in pods]
        key = task.replace("-", "_")
        data[f"{key}.host"] = "\n".join(hosts)
        data[f"VC_{key.upper()}_HOSTS"] = ",".join(hosts)
        data[f"VC_{key.upper()}_NUM"] = str(len(hosts))
    return data


def svc_env(job: dict[str, Any]) -> dict[str, str]:
    """The variables the svc plugin gives every container: both of every task's."""
    return {k: v for k, v in svc_configmap(job).items() if k.startswith("VC_")}


def ssh_config(job: dict[str, Any]) -> str:
    """The ssh plugin's `config` entry of its Secret."""
    name = job["metadata"]["name"]
    text = "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n"
    for pods in pod_names(job).values():
        for pod in pods:
            text += f"Host {pod}\n  HostName {pod}.{name}\n"
    return text


def template_env(task: dict[str, Any]) -> dict[str, str]:
    """The literal environment of a task's first container."""
    container = task["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
