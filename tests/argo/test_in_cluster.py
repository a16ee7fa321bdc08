"""A step inside a pod, as KFP and Argo users run it: the runtime image on the real node runs
`vpipe train tf` with the pod's own credentials (the ServiceAccount token, CA and namespace
the kubelet mounts; the API server at KUBERNETES_SERVICE_HOST/PORT; no kubeconfig), as the
shipped `vpipe-runner` ServiceAccount. The Volcano Job it creates runs on the real node too,
and every request the pod made was granted by the shipped Roles (audit log)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.integration.waiting import wait_for
from tests.node.launcher import KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT
from volcano_pipelines.images import RUNTIME_IMAGE, TF_TRAINER_IMAGE

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers]


@pytest.fixture(scope="module")
def node(real_node: Any, images: Any) -> Any:
    for name in ("runtime", "trainer-tf"):
        real_node.import_image(images.archive(name))
    return real_node


def placement_flags(node: Any) -> list[str]:
    """`vpipe train` flags that put every task on the real node, small enough to share it."""
    taint = node.taint
    return ["--node-selector", f"{node.label}={node.label_value}",
            "--toleration", f"{taint['key']}={taint['value']}:{taint['effect']}",
            "--ps-cpu", "50m", "--worker-cpu", "50m", "--ps-memory", "256Mi", "--worker-memory", "256Mi"]


def test_train_step_in_a_pod_uses_in_cluster_credentials(cluster: Any, namespace: str, node: Any,
                                                         tmp_path: Path) -> None:
    plane = cluster.require_local()  # the audit log
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    try:
        with support.code_server(node.gateway_ip, support.tiny_code(tmp_path)) as url:
            step = ["vpipe", "train", "tf", "--name", "tiny", "--ps", "1", "--workers", "1",
                    "--image", TF_TRAINER_IMAGE, "--code-url", f"{url}/tiny/", "--env", "TINY_WORK_SECONDS=20",
                    "--timeout", "300", "--json", "-q", *placement_flags(node)]
            # The environment the kubelet gave, then the step (no kubeconfig anywhere).
            script = ('echo "service=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT '
                      'kubeconfig=${KUBECONFIG:-none} token=$(test -s /var/run/secrets/kubernetes.io/serviceaccount/token '
                      '&& echo yes) ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)" >&2; '
                      'exec "$@"')
            pod = {
                "metadata": {"name": "train-step"},
                "spec": {
                    **node.placement(), "serviceAccountName": "vpipe-runner", "restartPolicy": "Never",
                    "containers": [{"name": "step", "image": RUNTIME_IMAGE, "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", script, "sh", *step],
                                    "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}}}],
                },
            }
            core.create_namespaced_pod(namespace, pod)
            # Measured from the host while the step waits for its job (the worker "trains" 20 s).
            wait_for("the Volcano Job", lambda: _jobs(api, namespace), timeout=120)
            usage = support.sample_while("vpipe train tf --name tiny", 10.0)
            done = wait_for("the step pod to finish", lambda: _finished(core, namespace, "train-step"), timeout=300)
            log = core.read_namespaced_pod_log("train-step", namespace)
    finally:
        support.delete_cluster_scoped(api, objects)

    assert done == "Succeeded", log
    env_line = next(line for line in log.splitlines() if line.startswith("service="))
    assert env_line == (f"service={KUBERNETES_SERVICE_IP}:{KUBERNETES_SERVICE_PORT} kubeconfig=none token=yes "
                        f"ns={namespace}"), env_line
    result = json.loads(log[log.index("{"):])
    assert result["phase"] == "Completed" and result["succeeded"], result
    job = _jobs(api, namespace)[0]
    assert job["metadata"]["name"] == "tiny" and job["status"]["state"]["phase"] == "Completed"
    # The training pods ran on the real node (their containers really ran: the worker's log).
    pods = core.list_namespaced_pod(namespace, label_selector="volcano.sh/job-name=tiny").items
    assert pods and all(p.spec.node_name == node.name for p in pods)
    worker_log = core.read_namespaced_pod_log("tiny-worker-0", namespace)
    assert "worker 0: done" in worker_log, worker_log

    refused, allowed = support.service_account_accesses(plane.audit_log, namespace, "vpipe-runner")
    assert refused == [], f"the pod's ServiceAccount was refused: {refused}"
    assert ("create", "batch.volcano.sh", "jobs", "") in allowed
    if usage is not None:
        first, second, wall = usage
        print(f"\nstep pod while waiting: {(second.cpu_seconds - first.cpu_seconds) / wall * 1000:.1f} mCPU, "
              f"RSS {second.rss_bytes / 2**20:.1f} MiB")


def _jobs(api: Any, namespace: str) -> list[dict[str, Any]]:
    return client.CustomObjectsApi(api).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs")["items"]


def _finished(core: Any, namespace: str, name: str) -> str | None:
    phase = core.read_namespaced_pod(name, namespace).status.phase
    return phase if phase in ("Succeeded", "Failed") else None
