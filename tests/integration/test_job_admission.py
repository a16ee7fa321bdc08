"""Rendered jobs against the real API server: Volcano's CRD schema must accept every shape
the builders produce (server-side dry run: validated, defaulted, not stored)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Resources, Role, Storage, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

pytestmark = pytest.mark.integration

TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
FULL_ROLE = Role(replicas=2, image="img:2", resources=Resources(cpu="1500m", memory="3Gi", gpu=1), env={"A": "$(x) 'q'"},
                 node_selector={"accel": "t4"}, tolerations=(TOLERATION,), labels={"team": "ml"}, annotations={"n": "v"})
FULL_JOB = JobOptions(name="full", queue="default", priority_class="high", min_available=5, max_retry=1,
                      ttl_seconds_after_finished=0, image_pull_secrets=("regcred",), service_account="trainer",
                      run_id="run-1", labels={"example.com/team": "ml"}, restart_on_pod_failure=False)


def shapes() -> dict[str, dict[str, Any]]:
    return {
        "tf-quickstart": build_tf_job(TFJobSpec(job=JobOptions(name="mnist"), worker=Role(replicas=10),
                                                code=CodeSource(url="http://files.example/mnist/"))),
        "tf-everything": build_tf_job(TFJobSpec(
            job=FULL_JOB, ps=FULL_ROLE, worker=FULL_ROLE, chief=Role(), evaluator=Role(),
            code=CodeSource(path="/code", pvc="code", entry="train.py"),
            storage=Storage(data_pvc="data", data_dir="/mnt/d", log_pvc="logs", log_dir="/mnt/l"),
            args=("--lr=0.1", "$(rm -rf /)"), port=5000)),
        "tf-archive": build_tf_job(TFJobSpec(job=JobOptions(name="arch"),
                                             code=CodeSource(url="https://h/c.tgz", sha256="a" * 64))),
        "mpi-default": build_mpi_job(MPIJobSpec(job=JobOptions(name="hello"), command=("mpi_hello",))),
        "mpi-everything": build_mpi_job(MPIJobSpec(
            job=replace(FULL_JOB, min_available=2), command=("python3", "x.py"), worker=FULL_ROLE, slots_per_worker=4, mpiexec_args=("-x", "A"),
            storage=Storage(data_pvc="data", log_pvc="logs"), code=CodeSource(url="http://f/code/"))),
    }


@pytest.mark.parametrize("shape", sorted(shapes()))
def test_crd_schema_accepts_rendered_job(cluster: Any, namespace: str, shape: str) -> None:
    job = shapes()[shape]
    job["metadata"]["namespace"] = namespace
    api = client.CustomObjectsApi(cluster.api_client())
    accepted = api.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job, dry_run="All")
    # Nothing the schema prunes: what we send is what would be stored.
    assert accepted["spec"]["tasks"] == job["spec"]["tasks"]
    for key in ("schedulerName", "minAvailable", "queue", "maxRetry", "plugins", "policies"):
        assert accepted["spec"][key] == job["spec"][key]
    assert api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs")["items"] == []


def test_missing_queue_is_bad_input_and_creates_nothing(cluster: Any, namespace: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "volcano_pipelines", "train", "tf", "--name", "q", "-n", namespace, "--queue", "no-such-queue",
         "--kubeconfig", str(cluster.kubeconfig), "-q"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--queue (job.queue)='no-such-queue'" in proc.stderr and "default" in proc.stderr
    api = client.CustomObjectsApi(cluster.api_client())
    assert api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs")["items"] == []


def test_watch_resumes_after_410_gone(cluster: Any, namespace: str, caplog: pytest.LogCaptureFixture) -> None:
    """A resourceVersion the API server no longer serves (as after a long disconnect) gets a
    real `410 Gone`; the watch re-reads the job and carries on instead of failing."""
    from volcano_pipelines.k8s.client import connect
    from volcano_pipelines.k8s.jobs import watch_job

    job = build_tf_job(TFJobSpec(job=JobOptions(name="gone", namespace=namespace)))
    api = client.CustomObjectsApi(cluster.api_client())
    created = api.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job)
    caplog.set_level("INFO", logger="volcano_pipelines.k8s.jobs")
    updates = watch_job(connect(str(cluster.kubeconfig)), namespace, "gone", lambda: 2, resource_version="1")
    first = next(u for u in updates if u is not None)
    assert first["metadata"]["uid"] == created["metadata"]["uid"]
    assert int(first["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])
    updates.close()
    assert "410 Gone" in caplog.text  # the expired path was really taken
