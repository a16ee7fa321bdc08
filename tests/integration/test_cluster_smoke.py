"""Smoke test of the test harness itself: a hand-written Volcano Job on the real control plane.

Proves that the apiserver accepts Volcano's CRDs, that Volcano's job controller creates the
PodGroup, pods, Service and ConfigMap, that the Volcano scheduler gang-schedules the pods on
kwok's fake nodes, that kwok plays the pod lifecycle of tests/cluster/behaviour.py, and
that Volcano's CompleteJob policy finishes the job (parameter server deleted).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.cluster import behaviour
from tests.integration.waiting import wait_for

pytestmark = pytest.mark.integration

GROUP, VERSION = "batch.volcano.sh", "v1alpha1"


def _template(task: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "smoke", **(labels or {})}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "main",
                "image": "registry.invalid/never-pulled:1",  # kwok runs no container
                "command": ["true"],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
            }],
        },
    }


def _job(name: str, worker_labels: dict[str, str] | None = None) -> dict[str, Any]:
    # Without Volcano's admission webhook nothing defaults these fields: set them all.
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "volcano",
            "queue": "default",
            "minAvailable": 3,
            "maxRetry": 0,
            "plugins": {"svc": [], "env": []},
            "tasks": [
                {"name": "ps", "replicas": 1, "minAvailable": 1, "template": _template("ps")},
                {
                    "name": "worker",
                    "replicas": 2,
                    "minAvailable": 2,
                    "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                    "template": _template("worker", worker_labels),
                },
            ],
        },
    }


def test_volcano_job_ps_worker_completes(cluster, namespace: str) -> None:
    api = cluster.api_client()
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    name = "smoke"
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", _job(name))

    # PodGroup created by Volcano's job controller with the gang size.
    def podgroup() -> dict[str, Any] | None:
        groups = custom.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", namespace, "podgroups")
        owned = [g for g in groups["items"]
                 if any(ref["name"] == name for ref in g["metadata"].get("ownerReferences", []))]
        return owned[0] if owned else None

    group = wait_for("PodGroup", podgroup, timeout=30)
    assert group["spec"]["minMember"] == 3

    # Sample pod phases until the job ends (kwok runs workers for ~3 s, so a sample sees them
    # running). The job's phase is read before the pods are listed: once it reads Completed,
    # that listing comes after the workers succeeded and shows their last phase (they are
    # kept), however long the machine paused between two samples.
    seen: dict[str, set[str]] = {}
    pods_by_name: dict[str, Any] = {}
    config_maps: dict[str, dict[str, str]] = {}
    services: dict[str, Any] = {}

    def job_phase() -> str:
        job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", name)
        return job.get("status", {}).get("state", {}).get("phase", "")

    def finished() -> bool:
        phase = job_phase()
        for pod in core.list_namespaced_pod(namespace).items:
            seen.setdefault(pod.metadata.name, set()).add(pod.status.phase)
            pods_by_name[pod.metadata.name] = pod
        # Volcano deletes the svc plugin's ConfigMap and Service when the job ends: look now.
        for cm in core.list_namespaced_config_map(namespace).items:
            config_maps[cm.metadata.name] = cm.data or {}
        for svc in core.list_namespaced_service(namespace).items:
            services[svc.metadata.name] = svc
        return phase == "Completed"

    wait_for("job Completed", finished, timeout=120)

    ps_pod, workers = f"{name}-ps-0", [f"{name}-worker-0", f"{name}-worker-1"]
    assert set(seen) == {ps_pod, *workers}
    for pod_name in seen:
        assert "Running" in seen[pod_name], f"{pod_name} never ran: {seen[pod_name]}"
        pod = pods_by_name[pod_name]
        assert pod.spec.node_name and pod.spec.node_name.startswith("kwok-node-")
        assert pod.spec.scheduler_name == "volcano"
        # svc plugin: stable DNS names through hostname + subdomain (the job's headless Service).
        assert pod.spec.hostname == pod_name
        assert pod.spec.subdomain == name
        env = {e.name: e.value for e in pod.spec.containers[0].env or []}
        assert "VK_TASK_INDEX" in env  # env plugin
    for worker in workers:
        assert "Succeeded" in seen[worker]
        terminated = pods_by_name[worker].status.container_statuses[0].state.terminated
        assert terminated is not None and terminated.exit_code == 0
    assert "Succeeded" not in seen[ps_pod]  # parameter servers never finish on their own

    # CompleteJob deleted the parameter server (kwok removes deleted pods).
    wait_for("PS pod deleted", lambda: ps_pod not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items}, timeout=30)

    hosts = config_maps[f"{name}-svc"]
    assert hosts["ps.host"].split() == [f"{ps_pod}.{name}"]
    assert hosts["worker.host"].split() == [f"{w}.{name}" for w in workers]
    assert services[name].spec.cluster_ip == "None"  # headless: per-pod DNS records
    # ... and cleans them up once the job is over.
    assert f"{name}-svc" not in {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}


def test_failure_label_fails_pod_with_exit_code(cluster, namespace: str) -> None:
    """The kwok failure label: a worker exits with the chosen code and the job fails."""
    api = cluster.api_client()
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    name = "smoke-fail"
    job = _job(name, worker_labels=behaviour.fail_with(7))
    job["spec"]["policies"] = [{"event": "PodFailed", "action": "AbortJob"}]
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", job)

    def failed_pod() -> Any:
        for pod in core.list_namespaced_pod(namespace).items:
            if pod.status.phase == "Failed":
                return pod
        return None

    pod = wait_for("a failed worker pod", failed_pod, timeout=90)
    assert pod.metadata.labels[behaviour.TASK_SPEC_LABEL] == "worker"
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 7
    assert terminated.reason == behaviour.FAIL_REASON

    def phase() -> str:
        got = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", name)
        return got.get("status", {}).get("state", {}).get("phase", "")

    wait_for("job Aborted", lambda: phase() in ("Aborting", "Aborted"), timeout=60)


def test_a_deleted_pod_is_removed_and_a_new_pod_of_its_name_is_left_alone(cluster, namespace: str) -> None:
    """The last step of a deletion on a kwok node is tests/cluster/pod_finalizer.py's, with
    the pod's UID as precondition, like a kubelet: a pod deleted with a grace period is gone
    soon after, and a new pod given the same name at once (what Volcano does on a restart)
    is never removed in its place (kwok's own delete stage did that: a job restarted twice)."""
    core = client.CoreV1Api(cluster.api_client())
    node = core.list_node(label_selector="type=kwok").items[0].metadata.name

    def pod(labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reused", "labels": labels},
                "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [
                    {"name": "main", "image": "registry.invalid/never-pulled:1"}]}}

    running = behaviour.keep_running()
    first = core.create_namespaced_pod(namespace, pod(running))
    wait_for("the pod Running", lambda: core.read_namespaced_pod("reused", namespace).status.phase == "Running",
             timeout=60)
    core.delete_namespaced_pod("reused", namespace, grace_period_seconds=30)

    def gone() -> bool:
        try:
            return core.read_namespaced_pod("reused", namespace).metadata.uid != first.metadata.uid
        except client.ApiException as err:
            return err.status == 404

    wait_for("the deleted pod removed", gone, timeout=30)
    second = core.create_namespaced_pod(namespace, pod(running))
    time.sleep(3)  # well past the finalizer's 0.2 s delay and any second event of the first pod
    kept = core.read_namespaced_pod("reused", namespace)
    assert kept.metadata.uid == second.metadata.uid and kept.metadata.deletion_timestamp is None


def test_rbac_is_enforced_for_impersonated_service_account(cluster, namespace: str) -> None:
    """RBAC is on: a ServiceAccount can list Volcano jobs only once a Role allows it."""
    admin = cluster.api_client()
    user = f"system:serviceaccount:{namespace}:runner"
    as_runner = client.CustomObjectsApi(cluster.api_client(impersonate=user))
    with pytest.raises(client.ApiException) as denied:
        as_runner.list_namespaced_custom_object(GROUP, VERSION, namespace, "jobs")
    assert denied.value.status == 403

    rbac = client.RbacAuthorizationV1Api(admin)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "jobs-reader"},
        "rules": [{"apiGroups": [GROUP], "resources": ["jobs"], "verbs": ["get", "list"]}],
    })
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "runner-jobs-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": namespace}],
    })
    wait_for("Role in effect", lambda: _allowed(as_runner, namespace), timeout=30)
    with pytest.raises(client.ApiException) as still_denied:  # only what the Role grants
        as_runner.create_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", _job("nope"))
    assert still_denied.value.status == 403


def _allowed(api: client.CustomObjectsApi, namespace: str) -> bool:
    try:
        api.list_namespaced_custom_object(GROUP, VERSION, namespace, "jobs")
        return True
    except client.ApiException:
        return False
