"""What a shared, multi-user cluster does to the objects vpipe creates, against the real
control plane (kube-apiserver, its garbage collector, Volcano's controller creating the pods):

* a namespace labelled `istio-injection: enabled` (a multi-user KFP profile): every pod vpipe
  creates there opts out of sidecar injection (label and annotation), and a user's own label
  wins over the default;
* TensorBoard owned by the run and by the training job outlives the job (whose `ttl` deletes it
  an hour after training) and goes with the run."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.cluster import behaviour
from tests.integration.waiting import wait_for
from volcano_pipelines.objects.podspec import ISTIO_INJECT
from volcano_pipelines.steps import Connection, tensorboard, train_tf

pytestmark = pytest.mark.integration


def _label_for_istio(cluster: Any, namespace: str) -> None:
    core = client.CoreV1Api(cluster.api_client())
    core.patch_namespace(namespace, {"metadata": {"labels": {"istio-injection": "enabled"}}})


def test_training_pods_in_an_istio_namespace_opt_out_of_the_sidecar(cluster: Any, namespace: str) -> None:
    _label_for_istio(cluster, namespace)
    keep = behaviour.keep_running()
    train_tf("mesh", image="trainer:test", code_url="https://example.com/code/", workers=2, ps=1, namespace=namespace,
             connection=Connection(str(cluster.kubeconfig)), wait=False, pod_labels={"worker": keep, "ps": {ISTIO_INJECT: "true"}})
    core = client.CoreV1Api(cluster.api_client())

    def pods() -> list[Any]:
        found = core.list_namespaced_pod(namespace, label_selector="volcano.sh/job-name=mesh").items
        return found if len(found) == 3 else []

    created = wait_for("the job's 3 pods", pods, timeout=120)
    by_task = {pod.metadata.name: pod for pod in created}
    for name in ("mesh-worker-0", "mesh-worker-1"):
        assert by_task[name].metadata.labels[ISTIO_INJECT] == "false"
        assert by_task[name].metadata.annotations[ISTIO_INJECT] == "false"
    # The user's own label wins (an opted-in task); the annotation default stays beside it.
    assert by_task["mesh-ps-0"].metadata.labels[ISTIO_INJECT] == "true"


def test_tensorboard_owned_by_the_run_outlives_its_training_job(cluster: Any, namespace: str, log_pvc: str) -> None:
    core = client.CoreV1Api(cluster.api_client())
    apps = client.AppsV1Api(cluster.api_client())
    custom = client.CustomObjectsApi(cluster.api_client())
    # A ConfigMap stands in for the run's Argo Workflow (the owner KFP's pod and Argo's template hand over).
    run = core.create_namespaced_config_map(namespace, {"metadata": {"name": "the-run"}})
    job = train_tf("board", image="trainer:test", code_url="https://example.com/code/", workers=1, ps=1,
                   namespace=namespace, connection=Connection(str(cluster.kubeconfig)), wait=False,
                   pod_labels={"worker": behaviour.keep_running()})
    result = tensorboard("board-tensorboard", log_pvc=log_pvc, namespace=namespace, job=job.name,
                         owner=f"v1/ConfigMap/the-run/{run.metadata.uid}", connection=Connection(str(cluster.kubeconfig)),
                         wait=False)
    assert result.name == "board-tensorboard"
    deployment = apps.read_namespaced_deployment("board-tensorboard", namespace)
    assert {o.kind for o in deployment.metadata.owner_references} == {"ConfigMap", "Job"}
    assert deployment.spec.template.metadata.labels[ISTIO_INJECT] == "false"
    # The job goes (its ttl, an hour after training): TensorBoard stays while the run is kept.
    custom.delete_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", "board")
    wait_for("the job gone", lambda: not custom.list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs")["items"], timeout=60)
    # The garbage collector acts on a deleted owner within a second or two: it drops the dangling
    # reference and keeps the object while another owner exists.
    wait_for("the job's ownerReference dropped", lambda: {o.kind for o in apps.read_namespaced_deployment(
        "board-tensorboard", namespace).metadata.owner_references} == {"ConfigMap"}, timeout=60)
    # The run goes: TensorBoard (and its Service) with it.
    core.delete_namespaced_config_map("the-run", namespace)

    def gone() -> bool:
        names = [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items]
        services = [s.metadata.name for s in core.list_namespaced_service(namespace).items]
        return "board-tensorboard" not in names and "board-tensorboard" not in services

    wait_for("TensorBoard garbage-collected with the run", gone, timeout=90)
