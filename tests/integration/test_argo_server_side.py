"""The generated Argo objects against a real API server with Argo's own CRDs (full schemas,
Argo v4.0.5, fetched into the Go module cache at test time, never committed), and the train
step's container, as the WorkflowTemplate runs it, against the real Volcano: every terminal
failed phase of a job fails the step with exit code 1, which is how Argo fails the node (no
`failureCondition` to forget a phase in)."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import behaviour
from tests.helpers.argo_crds import dry_run_create, owner_workflow
from tests.integration.waiting import wait_for
from tests.unit.argo import local_run
from volcano_pipelines.volcano.status import FAILED_PHASES

CODE_URL = "https://example.com/code/"  # never fetched: kwok runs no container


def _argo_objects() -> dict[str, dict[str, Any]]:
    return {path.name: yaml.safe_load(path.read_text()) for path in sorted(local_run.ARGO_DIR.glob("*.yaml"))
            if path.name != "kustomization.yaml"}


# --- server-side validation --------------------------------------------------------------


@pytest.mark.integration
def test_every_generated_argo_object_is_accepted(cluster: Any, namespace: str, argo_crds: None) -> None:
    objects = _argo_objects()
    assert {o["kind"] for o in objects.values()} == {"WorkflowTemplate", "CronWorkflow"}
    for name, obj in objects.items():
        obj["metadata"]["namespace"] = namespace
        stored = dry_run_create(cluster, obj)
        assert stored["spec"] == obj["spec"], f"{name}: the API server changed the spec"


@pytest.mark.integration
def test_the_v4_schema_is_in_force(cluster: Any, namespace: str, argo_crds: None) -> None:
    """The validation above can fail: the singular `schedule` (removed in Argo v4) and a
    misspelled template field are refused, not silently dropped."""
    from kubernetes.dynamic.exceptions import DynamicApiError

    cron = _argo_objects()["nightly-retrain.yaml"]
    cron["metadata"]["namespace"] = namespace
    old_style = copy.deepcopy(cron)
    old_style["spec"]["schedule"] = old_style["spec"].pop("schedules")[0]
    with pytest.raises(DynamicApiError) as refused:
        dry_run_create(cluster, old_style)
    assert refused.value.status in (400, 422) and "schedule" in str(refused.value.body)

    template = _argo_objects()["train-tf.yaml"]
    template["metadata"]["namespace"] = namespace
    template["spec"]["templates"][0]["activeDeadlineSecond"] = 60
    with pytest.raises(DynamicApiError) as typo:
        dry_run_create(cluster, template)
    assert "activeDeadlineSecond" in str(typo.value.body)


# --- every failed phase fails the Argo step ------------------------------------------------


def _job_phase(cluster: Any, namespace: str, name: str) -> str:
    from kubernetes import client

    api = client.CustomObjectsApi(cluster.api_client())
    job = api.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name)
    return str(job.get("status", {}).get("state", {}).get("phase", ""))


@pytest.mark.integration
def test_train_container_fails_the_step_for_every_failed_phase(cluster: Any, namespace: str, argo_crds: None,
                                                               tmp_path: Path) -> None:
    """The WorkflowTemplate's own container, run against Volcano: Completed exits 0; Failed
    (restarts used up), Terminated (no restart on failure) and Aborted (--timeout) exit 1,
    and the phase output parameter names the phase."""
    fail = f"worker:{behaviour.FAIL_LABEL}=3"
    # The template fixes the job's namespace to the workflow's ({{workflow.namespace}}).
    # The templates default to the queue manifests/cluster creates (vpipe); the test cluster has default.
    common = {"code-url": CODE_URL, "timeout": "120", "queue": "default"}
    cases = {
        "completes": {"workers": "1"},
        "fails": {"workers": "1", "max-retry": "1", "pod-labels": fail},
        "terminates": {"workers": "1", "restart-on-failure": "false", "pod-labels": fail},
        # 3 workers x 4 GPUs never fit the fake nodes: the step's timeout aborts the job.
        "aborts": {"workers": "3", "worker-gpus": "4", "timeout": "20"},
    }
    tmpl = local_run.template(local_run.load("train-tf.yaml"))
    owners = {name: owner_workflow(cluster, namespace, name) for name in cases}

    def run(name: str) -> local_run.ContainerRun:
        work = tmp_path / name
        work.mkdir()
        given = {**common, **cases[name], "name": name}
        return local_run.run(tmpl, given, work, env={"KUBECONFIG": str(cluster.kubeconfig)}, workflow=owners[name])

    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        runs = dict(zip(cases, pool.map(run, cases), strict=True))

    assert runs["completes"].returncode == 0, runs["completes"].stderr
    assert runs["completes"].outputs["phase"] == "Completed"
    assert runs["completes"].outputs["succeeded"] == "true"
    for name in ("fails", "terminates", "aborts"):
        assert runs[name].returncode == 1, (name, runs[name].stderr)
        assert runs[name].outputs["succeeded"] == "false", name
        assert runs[name].outputs["run-id"] == owners[name]["uid"]
    assert runs["fails"].outputs["phase"] == "Failed"
    assert runs["terminates"].outputs["phase"] == "Terminated"
    assert runs["aborts"].outputs["phase"] in ("Aborting", "Aborted")
    wait_for("job Aborted", lambda: _job_phase(cluster, namespace, "aborts") == "Aborted", timeout=60)
    seen = {_job_phase(cluster, namespace, name) for name in ("fails", "terminates", "aborts")}
    assert seen == FAILED_PHASES, seen
    from kubernetes import client

    job = client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", "fails")
    assert [(o["kind"], o["name"], o["uid"]) for o in job["metadata"]["ownerReferences"]] == [
        ("Workflow", "owner-fails", owners["fails"]["uid"])]
