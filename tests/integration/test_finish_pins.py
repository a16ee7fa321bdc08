"""The exit handler (`finish_run`) against the real control plane, pinning two behaviours no
other test held (issue 42):

* with on_failure=abort, a training job that has already ended (Failed, Aborted, Terminated)
  is kept and reported "kept": never aborted again, never deleted;
* when the training job runs in another namespace than the pipeline's own, the unfinished copy
  job of the run's sync step, in the step pod's namespace (the context's), is still found and
  cleaned up."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.cluster import behaviour
from tests.integration.waiting import wait_for
from volcano_pipelines.steps import Connection, finish_run, train_tf

pytestmark = pytest.mark.integration

GROUP, VERSION = "batch.volcano.sh", "v1alpha1"


def _job(cluster: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "jobs", name)
        return found
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def _phase(cluster: Any, namespace: str, name: str) -> str:
    return str((((_job(cluster, namespace, name) or {}).get("status") or {}).get("state") or {}).get("phase") or "")


def _commands(cluster: Any, namespace: str) -> list[str]:
    items = client.CustomObjectsApi(cluster.api_client()).list_namespaced_custom_object(
        "bus.volcano.sh", "v1alpha1", namespace, "commands")["items"]
    return sorted(str(c.get("action")) for c in items)


@pytest.mark.parametrize("ended", ["Failed", "Aborted", "Terminated"])
def test_abort_keeps_a_job_that_has_already_ended(cluster: Any, namespace: str, ended: str) -> None:
    from volcano_pipelines.k8s import volcano as k8s_volcano
    from volcano_pipelines.k8s.client import connect

    run_id = f"ended-{ended.lower()}"
    worker = behaviour.keep_running() if ended == "Aborted" else behaviour.fail_with(7)
    job = train_tf("ended", run_id=run_id, image="trainer:test", code_url="https://example.com/code/", workers=1, ps=1,
                   namespace=namespace, connection=Connection(str(cluster.kubeconfig)), wait=False, max_retry=1,
                   restart_on_failure=ended != "Terminated", pod_labels={"worker": worker})
    if ended == "Aborted":
        wait_for("the job Running", lambda: _phase(cluster, namespace, job.name) == "Running", timeout=120)
        k8s_volcano.abort_job(connect(str(cluster.kubeconfig), None), _job(cluster, namespace, job.name) or {}, "Test")
    wait_for(f"the job {ended}", lambda: _phase(cluster, namespace, job.name) == ended, timeout=180)
    before = _commands(cluster, namespace)
    report = finish_run(run_id, pipeline_state="FAILED", namespace=namespace, connection=Connection(str(cluster.kubeconfig)),
                        on_failure="abort")
    assert (report.outcome, report.cleanup, report.job_phase) == ("failed", "kept", ended), report
    assert _commands(cluster, namespace) == before  # no AbortJob sent to a job already over
    assert _phase(cluster, namespace, job.name) == ended  # still there, as it was


def test_a_copy_job_in_the_pipelines_namespace_is_cleaned_when_training_runs_elsewhere(
        cluster: Any, namespace: str, tmp_path: Path) -> None:
    from volcano_pipelines.volcano.copyjob import CopyJobSpec, build_copy_job, copy_job_name
    from volcano_pipelines.volcano.spec import JobOptions, Role

    core = client.CoreV1Api(cluster.api_client())
    training = f"{namespace[:50]}-tr-{uuid.uuid4().hex[:4]}"
    core.create_namespace({"metadata": {"name": training, "labels": {"vpipe-test": "true"}}})
    try:
        # The step pod's own namespace is the pipeline's: the kubeconfig context's namespace.
        config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
        current = config.get("current-context")
        for entry in config["contexts"]:
            if entry["name"] == current or current is None:
                entry["context"]["namespace"] = namespace
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(config))
        run_id = "elsewhere"
        name = copy_job_name(run_id)
        spec = CopyJobSpec(JobOptions(name, namespace=namespace, image="runtime:test", queue="default", run_id=run_id,
                                      pod_security="restricted"), workers=2, claim="missing", subpath=None, role=Role())
        client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "jobs", build_copy_job(spec))
        report = finish_run(run_id, pipeline_state="RUNNING", namespace=training, connection=Connection(str(kubeconfig)),
                            on_failure="delete")
        assert report.namespace == training and report.job is None
        assert report.copy_job is not None, report
        assert (report.copy_job["name"], report.copy_job["namespace"], report.copy_job["cleanup"]) == (
            name, namespace, "deleted"), report.copy_job
        wait_for("the copy job gone", lambda: _job(cluster, namespace, name) is None, timeout=60)
    finally:
        core.delete_namespace(training)
