"""Argo Workflows on the test control plane: submitting a Workflow (or one from a
WorkflowTemplate), waiting for it to finish and saying why it did not succeed, and the Volcano
Jobs and pods its steps made."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.integration.waiting import wait_for
import json
import time
from pathlib import Path
from volcano_pipelines.images import TF_TRAINER_IMAGE


GROUP, VERSION = "argoproj.io", "v1alpha1"


def submit(api: Any, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", body)


def workflow(api: Any, namespace: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", name)


def wait_finished(api: Any, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        wf = workflow(api, namespace, name)
        return wf if wf.get("status", {}).get("phase") in ("Succeeded", "Failed", "Error") else None

    return wait_for(f"workflow {name} to finish", done, timeout=timeout,
                    explain=lambda: str(workflow(api, namespace, name).get("status")))


def _why(wf: dict[str, Any]) -> str:
    status = wf.get("status", {})
    nodes = [(n.get("displayName"), n.get("phase"), n.get("message")) for n in status.get("nodes", {}).values()]
    return f"{status.get('phase')}: {status.get('message')}; nodes {nodes}"


def placement(node: Any) -> dict[str, Any]:
    """Workflow-level: every step pod on the real node."""
    return node.placement()


VOLCANO = ("batch.volcano.sh", "v1alpha1")


def train_parameters(real_node: Any, url: str, name: str, work_seconds: int, timeout: str = "600") -> dict[str, str]:
    taint = real_node.taint
    return {
        "name": name, "timeout": timeout, "image": TF_TRAINER_IMAGE, "code-url": f"{url}/tiny/",
        "ps": "1", "workers": "1", "ps-cpu": "20m", "worker-cpu": "20m", "ps-memory": "128Mi",
        "worker-memory": "128Mi", "env": f"TINY_WORK_SECONDS={work_seconds}", "queue": "default",
        "node-selector": f"{real_node.label}={real_node.label_value}",
        "tolerations": f"{taint['key']}={taint['value']}:{taint['effect']}",
    }


def submit_train(api: Any, namespace: str, real_node: Any, parameters: dict[str, str]) -> str:
    """Submit a Workflow from the shipped template. The controller resolves workflowTemplateRef
    from its informer's cache: a Workflow submitted right after the template was created can
    end in Error ("... not found"); that one is deleted and submitted again (a race of the
    test's set-up, not of the product)."""
    return submit_from_template(api, namespace, real_node, "vpipe-train-tf", "fault-", parameters)


def submit_from_template(api: Any, namespace: str, real_node: Any, template: str, prefix: str,
                         parameters: dict[str, str], **spec: Any) -> str:
    """A Workflow from a WorkflowTemplate (with `spec` fields of the Workflow's own, e.g. a
    deadline), resubmitted while the controller does not know the template yet (submit_train)."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"generateName": prefix},
        "spec": {"workflowTemplateRef": {"name": template}, **placement(real_node),
                 "arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]}, **spec},
    }
    for _attempt in range(10):
        name = str(submit(api, namespace, body)["metadata"]["name"])
        status = wait_for(f"workflow {name} started", lambda name=name: workflow(api, namespace, name).get("status"),
                          timeout=60)
        if "not found" not in str(status.get("message", "")):
            return name
        client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", name)
        time.sleep(2)
    raise AssertionError(f"the controller never found the WorkflowTemplate {template}")


def jobs(api: Any, namespace: str) -> dict[str, dict[str, Any]]:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(*VOLCANO, namespace, "jobs")["items"]
    return {j["metadata"]["name"]: j for j in items}


def training_pods(core: Any, namespace: str, job: str) -> list[Any]:
    return core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items


def step_pods(core: Any, namespace: str, wf_name: str) -> list[Any]:
    return core.list_namespaced_pod(namespace, label_selector=f"workflows.argoproj.io/workflow={wf_name}").items


def running(api: Any, namespace: str, job: str) -> bool:
    found = jobs(api, namespace).get(job)
    return bool(found) and found.get("status", {}).get("state", {}).get("phase") == "Running"


def job_creations(audit_log: Path, namespace: str) -> list[tuple[str, int]]:
    """(job name, HTTP code) of every `create` of a Volcano Job in `namespace` (audit log)."""
    out = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (event.get("stage") == "ResponseComplete" and event.get("verb") == "create"
                and ref.get("resource") == "jobs" and ref.get("apiGroup") == "batch.volcano.sh"
                and ref.get("namespace") == namespace):
            out.append((ref.get("name") or (event.get("requestObject") or {}).get("metadata", {}).get("name", ""),
                        int((event.get("responseStatus") or {}).get("code", 0))))
    return out
