"""The reap sweeper deployed the way a platform deploys it: manifests/sweeper (ServiceAccount
`vpipe-reaper`, its Role, the Deployment running `vpipe reap --selector ...`, the CronJob
running it with `--once`), the runtime image on the real node, in-cluster credentials. It
ends the parameter servers of a Volcano Job without the completion policy, scales a classic
layout's parameter-server Deployment to zero, and deletes a TensorBoard whose --ttl has
passed. Every request it made was granted by its Role, and the Role grants nothing unused.

Test-only changes to the shipped objects: the real node's nodeSelector and toleration, and
`--grace 2` instead of 30 (seconds the parameter servers may outlive the workers)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.rbac import granted
from tests.integration.waiting import wait_for
from volcano_pipelines.images import RUNTIME_IMAGE
from volcano_pipelines.steps import Connection, ObjectLabels, tensorboard

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers]

REAP_LABEL = "volcano-pipelines/reap"
RBAC = "manifests/sweeper/rbac/rbac.yaml"
DEPLOYMENT = "manifests/sweeper/deployment/deployment.yaml"
CRONJOB = "manifests/sweeper/cronjob/cronjob.yaml"


@pytest.fixture(scope="module")
def node(real_node: Any, images: Any) -> Any:
    real_node.import_image(images.archive("runtime"))
    return real_node


def for_test(pod_spec: dict[str, Any], node: Any) -> None:
    """The shipped pod spec, placed on the real node, with a short grace period."""
    pod_spec.update(node.placement())
    container = pod_spec["containers"][0]
    assert container["image"] == RUNTIME_IMAGE, "the sweeper manifests name another image than this release's"
    args = container["args"]
    args[args.index("--grace") + 1] = "2"


def policy_less_job(name: str, node: Any) -> dict[str, Any]:
    """A hand-written Volcano Job without `TaskCompleted -> CompleteJob`: its parameter server
    would run forever after the worker is done."""
    def task(task_name: str, command: list[str]) -> dict[str, Any]:
        return {"name": task_name, "replicas": 1, "template": {
            "metadata": {"labels": {REAP_LABEL: "true"}},
            "spec": {**node.placement(), "restartPolicy": "Never", "containers": [{
                "name": task_name, "image": node.busybox_image, "imagePullPolicy": "Never", "command": command,
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}

    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "labels": {REAP_LABEL: "true"}},
            "spec": {"schedulerName": "volcano", "minAvailable": 2, "queue": "default",
                     "tasks": [task("ps", ["sleep", "3600"]), task("worker", ["sh", "-c", "sleep 3"])]}}


def classic_layout(node: Any) -> list[dict[str, Any]]:
    """Workers as a batch/v1 Job, the parameter server as a Deployment."""
    labels = {REAP_LABEL: "true", "app": "classic"}
    container = {"image": node.busybox_image, "imagePullPolicy": "Never",
                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    worker = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "classic-worker", "labels": labels},
              "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": {
                  **node.placement(), "restartPolicy": "Never",
                  "containers": [{"name": "worker", **container, "command": ["sh", "-c", "sleep 3"]}]}}}}
    ps = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "classic-ps", "labels": labels},
          "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "classic", "role": "ps"}},
                   "template": {"metadata": {"labels": {**labels, "role": "ps"}}, "spec": {
                       **node.placement(), "containers": [{"name": "ps", **container, "command": ["sleep", "3600"]}]}}}}
    return [worker, ps]


def _vcjob(custom: Any, namespace: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name)


def _phase(custom: Any, namespace: str, name: str) -> str:
    return _vcjob(custom, namespace, name).get("status", {}).get("state", {}).get("phase", "")


def _worker_done(core: Any, namespace: str, job: str) -> bool:
    pods = core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items
    return any(p.metadata.name == f"{job}-worker-0" and p.status.phase == "Succeeded" for p in pods)


def test_shipped_sweeper_reaps_on_the_real_node(cluster: Any, namespace: str, node: Any) -> None:
    plane = cluster.require_local()
    api = cluster.api_client()
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    rbac = support.load(RBAC)
    support.apply_objects(api, namespace, copy.deepcopy(rbac))

    # What it should act on: a policy-less Volcano Job, a classic layout, a TensorBoard with a TTL.
    custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs",
                                           policy_less_job("nopolicy", node))
    support.apply_objects(api, namespace, classic_layout(node))
    core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "logs"}, "spec": {
        "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    board = tensorboard("board", log_pvc="logs", namespace=namespace, ttl=20, object_labels=ObjectLabels(labels={REAP_LABEL: "true"}),
                        wait=False, connection=Connection(str(cluster.kubeconfig)))
    assert board.expires_at

    (sweeper,) = support.load(DEPLOYMENT)
    for_test(sweeper["spec"]["template"]["spec"], node)
    support.apply_objects(api, namespace, [sweeper])

    wait_for("the policy-less job Completed by the sweeper", lambda: _phase(custom, namespace, "nopolicy") == "Completed",
             timeout=180, explain=lambda: str(_vcjob(custom, namespace, "nopolicy").get("status")))
    wait_for("its parameter server gone", lambda: not any(
        p.metadata.name == "nopolicy-ps-0" and p.status.phase == "Running"
        for p in core.list_namespaced_pod(namespace, label_selector="volcano.sh/job-name=nopolicy").items),
        timeout=60)
    wait_for("the classic parameter servers scaled to zero",
             lambda: apps.read_namespaced_deployment("classic-ps", namespace).spec.replicas == 0, timeout=120)
    wait_for("the expired TensorBoard deleted", lambda: not any(
        d.metadata.name == "board" for d in apps.list_namespaced_deployment(namespace).items), timeout=120)
    events = core.list_namespaced_event(namespace).items
    assert any(e.involved_object.name == "nopolicy" and e.reason == "ParameterServersReaped" for e in events), \
        [(e.involved_object.name, e.reason) for e in events]
    apps.delete_namespaced_deployment("vpipe-reap-sweeper", namespace)

    # The CronJob variant, one run (as `kubectl create job --from=cronjob/...` starts it).
    custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs",
                                           policy_less_job("nightly", node))
    wait_for("the second job's worker done", lambda: _worker_done(core, namespace, "nightly"), timeout=120)
    (cron,) = support.load(CRONJOB)
    support.apply_objects(api, namespace, [copy.deepcopy(cron)])
    job_spec = copy.deepcopy(cron["spec"]["jobTemplate"]["spec"])
    for_test(job_spec["template"]["spec"], node)
    assert "--once" in job_spec["template"]["spec"]["containers"][0]["args"]
    batch.create_namespaced_job(namespace, {"metadata": {"name": "sweep-once"}, "spec": job_spec})
    wait_for("the --once sweep Complete", lambda: any(
        c.type == "Complete" and c.status == "True"
        for c in (batch.read_namespaced_job("sweep-once", namespace).status.conditions or [])), timeout=180,
        explain=lambda: str(batch.read_namespaced_job("sweep-once", namespace).status))
    assert _phase(custom, namespace, "nightly") in ("Completing", "Completed")

    refused, allowed = support.service_account_accesses(plane.audit_log, namespace, "vpipe-reaper")
    assert refused == [], f"the sweeper was refused: {refused}"
    unused = sorted(granted(rbac) - allowed)
    assert unused == [], f"the sweeper's Role grants what it never used: {unused}"
