"""Workflows driven by Argo's own controller (v4.0.5), every step in a pod on the real node
with argoexec (emissary) beside it: a trivial Workflow, and the shipped WorkflowTemplate
`vpipe-train-tf` (pipelines/argo/) training a tiny job. Both run to Succeeded and their
output parameters are read back from the Workflow's status; the ServiceAccount's requests
(the step and argoexec) are all granted by manifests/base + manifests/argo, and the
executor's Role is used in full."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.rbac import granted
from tests.helpers.workflows import GROUP, VERSION, _why, placement, submit, wait_finished
from tests.integration.waiting import wait_for
from volcano_pipelines.images import TF_TRAINER_IMAGE

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers]


def pod_outputs(wf: dict[str, Any]) -> dict[str, str]:
    """The output parameters of the workflow's pod node(s), by name."""
    out: dict[str, str] = {}
    for node in wf["status"]["nodes"].values():
        if node.get("type") == "Pod":
            out.update({p["name"]: p.get("value", "") for p in node.get("outputs", {}).get("parameters", [])})
    return out


def test_trivial_workflow_succeeds_and_its_output_is_read_back(cluster: Any, namespace: str, real_node: Any,
                                                                argo: Any) -> None:
    api = cluster.api_client()
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    try:
        started = time.monotonic()
        wf = submit(api, namespace, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"generateName": "hello-"},
            "spec": {
                "entrypoint": "main", "serviceAccountName": "vpipe-runner", **placement(real_node),
                "templates": [{
                    "name": "main",
                    "container": {"image": real_node.busybox_image, "imagePullPolicy": "Never",
                                  "command": ["sh", "-c", "echo hello from $(hostname) > /tmp/greeting"]},
                    "outputs": {"parameters": [{"name": "greeting", "valueFrom": {"path": "/tmp/greeting"}}]},
                }],
            },
        })
        name = wf["metadata"]["name"]
        finished = wait_finished(api, namespace, name, timeout=180)
        seconds = time.monotonic() - started
    finally:
        support.delete_cluster_scoped(api, objects)
    assert finished["status"]["phase"] == "Succeeded", _why(finished)
    assert pod_outputs(finished) == {"greeting": f"hello from {name}"}, finished["status"]["nodes"]
    print(f"\ntrivial workflow: submit to Succeeded {seconds:.1f} s")


class JobClock:
    """Polls the namespace's Volcano Jobs: when the first appeared and when it was Running."""

    def __init__(self, api: Any, namespace: str) -> None:
        self.created: float | None = None
        self.running: float | None = None
        self._stop = threading.Event()
        self._custom = client.CustomObjectsApi(api)
        self._namespace = namespace
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.running is None:
            jobs = self._custom.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self._namespace,
                                                              "jobs")["items"]
            if jobs and self.created is None:
                self.created = time.monotonic()
            if jobs and jobs[0].get("status", {}).get("state", {}).get("phase") == "Running":
                self.running = time.monotonic()
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def enforce_restricted(api: Any, namespace: str) -> None:
    """Label the namespace as a shared cluster's would be: the API server's PodSecurity admission
    then refuses any pod that does not meet the restricted level, and Istio (where installed)
    injects sidecars. Checked: a plain pod is refused, so what runs there afterwards met it."""
    core = client.CoreV1Api(api)
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted",
                                                             "istio-injection": "enabled"}}})
    try:
        core.create_namespaced_pod(namespace, {"metadata": {"name": "plain"},
                                               "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    except client.ApiException as err:
        assert err.status == 403 and "restricted" in str(err.body), err.body
    else:
        raise AssertionError(f"namespace {namespace} does not enforce the restricted Pod Security level")


def test_shipped_train_template_runs_a_volcano_job_to_completion(cluster: Any, namespace: str, real_node: Any,
                                                                 argo: Any, tmp_path: Path) -> None:
    """...in a namespace that enforces the restricted Pod Security level: the step pod (with Argo's
    init and wait containers, given the controller's executor settings) and, with pod-security
    restricted, the training pods all meet it."""
    plane = cluster.require_local()
    api = cluster.api_client()
    enforce_restricted(api, namespace)
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    support.apply_objects(api, namespace, support.load("pipelines/argo/train-tf.yaml"))
    taint = real_node.taint
    try:
        with support.code_server(real_node.gateway_ip, support.tiny_code(tmp_path)) as url:
            parameters = {
                "name": "wf-train", "timeout": "300", "image": TF_TRAINER_IMAGE, "code-url": f"{url}/tiny/",
                "ps": "1", "workers": "1", "ps-cpu": "50m", "worker-cpu": "50m", "ps-memory": "256Mi",
                "worker-memory": "256Mi", "env": "TINY_WORK_SECONDS=20", "queue": "default",
                "pod-security": "restricted",
                "node-selector": f"{real_node.label}={real_node.label_value}",
                "tolerations": f"{taint['key']}={taint['value']}:{taint['effect']}",
            }
            clock = JobClock(api, namespace)
            started = time.monotonic()
            wf = submit(api, namespace, {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"generateName": "train-"},
                "spec": {"workflowTemplateRef": {"name": "vpipe-train-tf"}, **placement(real_node),
                         "arguments": {"parameters": [{"name": k, "value": v} for k, v in parameters.items()]}},
            })
            name = wf["metadata"]["name"]
            wait_for("the Volcano Job Running", lambda: clock.running, timeout=240)
            step = support.sample_while("vpipe train tf --name wf-train", 10.0)
            executor = support.process_usage("argoexec")
            finished = wait_finished(api, namespace, name, timeout=400)
            total = time.monotonic() - started
            clock.stop()
    finally:
        support.delete_cluster_scoped(api, objects)

    assert finished["status"]["phase"] == "Succeeded", _why(finished)
    outputs = pod_outputs(finished)
    assert outputs["phase"] == "Completed" and outputs["succeeded"] == "true", outputs
    assert outputs["name"] == "wf-train" and outputs["namespace"] == namespace
    assert outputs["run-id"] == finished["metadata"]["uid"]  # {{workflow.uid}}: a retry re-attaches
    job = client.CustomObjectsApi(api).get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace,
                                                                    "jobs", "wf-train")
    assert job["status"]["state"]["phase"] == "Completed"
    for task in job["spec"]["tasks"]:  # what let the training pods in
        assert task["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        assert task["template"]["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"

    # Every request of the step and of argoexec (one ServiceAccount) was granted, and the
    # executor's Role (manifests/argo) is used in full.
    refused, allowed = support.service_account_accesses(plane.audit_log, namespace, "vpipe-runner")
    assert refused == [], f"refused: {refused}"
    executor_role = granted([o for o in objects if o["metadata"]["name"] == "vpipe-argo-executor"
                             and o["kind"] == "Role"])
    assert executor_role and executor_role <= allowed, f"unused: {sorted(executor_role - allowed)}"

    assert clock.created is not None and clock.running is not None
    print(f"\nvpipe-train-tf workflow: submit to Volcano Job created {clock.created - started:.1f} s, "
          f"to Running {clock.running - started:.1f} s, to Succeeded {total:.1f} s")
    if step is not None:
        first, second, wall = step
        print(f"step (vpipe) while waiting: {(second.cpu_seconds - first.cpu_seconds) / wall * 1000:.1f} mCPU, "
              f"RSS {second.rss_bytes / 2**20:.1f} MiB; argoexec processes RSS "
              f"{(executor.rss_bytes if executor else 0) / 2**20:.1f} MiB")
