"""The exit handler's component, run the way KFP's backend runs it: the command and arguments
of `components/finish_run.yaml` in a process of their own (KFP's executor_main loads the
component's embedded source), handed an executor input whose `status` is a
PipelineTaskFinalStatus in each vocabulary the handler can get. Against the local control
plane, with one running Volcano Job of the run: what is kept and what is deleted.

KFP's backend passes the ML Metadata execution state (COMPLETE or CACHED after a successful
run, FAILED, CANCELED — KFP's sample pipeline_with_input_status_state.py); kfp.local passes
SUCCEEDED / FAILED; an Argo onExit passes Succeeded / Failed / Error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

import volcano_pipelines
from tests.cluster import behaviour
from tests.integration.waiting import wait_for
from volcano_pipelines.steps import Connection, train_tf

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GROUP, VERSION = "batch.volcano.sh", "v1alpha1"
OUTPUTS = ("pipeline_state", "job_phase", "cleanup", "result")


def _executor_input(outputs: Path, parameters: dict[str, Any]) -> dict[str, Any]:
    def artifact(name: str, schema: str) -> dict[str, Any]:
        return {"artifacts": [{"name": name, "type": {"schemaTitle": schema}, "uri": str(outputs / name),
                               "metadata": {}}]}

    return {
        "inputs": {"parameterValues": parameters},
        "outputs": {
            "parameters": {name: {"outputFile": str(outputs / "parameters" / name)} for name in OUTPUTS},
            "artifacts": {"metrics": artifact("metrics", "system.Metrics"),
                          "summary": artifact("summary", "system.Markdown"),
                          "post_mortem": artifact("post_mortem", "system.Artifact")},
            "outputFile": str(outputs / "executor_output.json"),
        },
    }


def _run_component(tmp_path: Path, parameters: dict[str, Any]) -> tuple[subprocess.CompletedProcess[str], Path]:
    """components/finish_run.yaml's container command + args, as the pod would run them."""
    spec = yaml.safe_load((ROOT / "components" / "finish_run.yaml").read_text())
    container = spec["deploymentSpec"]["executors"]["exec-finish-run"]["container"]
    outputs = tmp_path / "outputs"
    (outputs / "parameters").mkdir(parents=True)
    executor_input = json.dumps(_executor_input(outputs, parameters))
    argv = [*container["command"], *(executor_input if arg == "{{$}}" else arg for arg in container["args"])]
    source = str(Path(volcano_pipelines.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    return proc, outputs


def _jobs(cluster: Any, namespace: str) -> list[str]:
    custom = client.CustomObjectsApi(cluster.api_client())
    return [job["metadata"]["name"] for job in
            custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "jobs")["items"]]


# state handed to the exit handler -> (outcome, what happens to the run's job with on_failure=delete)
# The job keeps running in every case here: a word that is an end state decides alone.
CASES = {
    "COMPLETE": ("succeeded", "none"),  # KFP backend, successful run
    "CACHED": ("succeeded", "none"),
    "SUCCEEDED": ("succeeded", "none"),  # kfp.local
    "Succeeded": ("succeeded", "none"),  # Argo's {{workflow.status}}
    "FAILED": ("failed", "deleted"),
    "CANCELED": ("failed", "deleted"),
    "Error": ("failed", "deleted"),
    # Not an end state: decided from the job, which is still Running at the exit handler, so the
    # run failed or was cancelled (the train step waits for its job's end) and the job goes.
    "RUNNING": ("failed", "deleted"),
}


def _submit(cluster: Any, namespace: str, run_id: str, worker_labels: dict[str, str]) -> str:
    submitted = train_tf("exit", run_id=run_id, image="trainer:test", code_url="https://example.com/code/",
                         workers=1, ps=1, namespace=namespace, connection=Connection(str(cluster.kubeconfig)), wait=False,
                         pod_labels={"worker": worker_labels})
    assert _jobs(cluster, namespace) == [submitted.name]
    return submitted.name


def _finish(cluster: Any, namespace: str, tmp_path: Path, run_id: str, state: str,
            succeeded: bool, **more: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    proc, outputs = _run_component(tmp_path, {
        "run_id": run_id, "namespace": namespace, "kubeconfig": str(cluster.kubeconfig), **more,
        "status": {"state": state, "pipelineJobResourceName": f"projects/p/pipelineJobs/{run_id}",
                   "pipelineTaskName": "exit-handler-1",
                   # KFP's backend leaves error empty (resolve.go: a TODO); code 0 / 1 as kfp.local sets it.
                   "error": {"code": 0 if succeeded else 1, "message": ""}},
    })
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = json.loads((outputs / "executor_output.json").read_text())["parameterValues"]
    return proc, written, (outputs / "summary").read_text()


@pytest.mark.parametrize("state", list(CASES))
def test_the_exit_handler_keeps_or_deletes_the_job_by_the_state_it_is_handed(
        cluster: Any, namespace: str, tmp_path: Path, state: str) -> None:
    outcome, cleanup = CASES[state]
    run_id = f"exit-{state.lower()}"
    name = _submit(cluster, namespace, run_id, behaviour.keep_running())
    _, written, summary = _finish(cluster, namespace, tmp_path, run_id, state, outcome == "succeeded")
    assert written["pipeline_state"] == state
    assert written["cleanup"] == cleanup
    assert written["result"]["outcome"] == outcome
    assert written["job_phase"] not in ("", "NotFound")
    assert f"| cleanup of the training job | {cleanup} |" in summary
    assert f"| decided by | {written['result']['rule']} |" in summary
    assert _jobs(cluster, namespace) == ([] if cleanup == "deleted" else [name])
    # A run that did not succeed leaves the record of its job's pods, saved before the delete,
    # in the component's post_mortem artifact; one that succeeded leaves none from here.
    records = sorted(p.name for p in (tmp_path / "outputs" / "post_mortem").rglob("*") if p.is_file())
    if outcome == "succeeded":
        assert records == ["README.md"] and written["result"]["post_mortem"] is None
    else:
        assert records == [f"{name}.json", f"{name}.md"], records
        # (The job was submitted a moment ago: its pods may not exist yet; the scenarios below
        # look at the pods.)
        record = json.loads((tmp_path / "outputs" / "post_mortem" / namespace / f"{name}.json").read_text())
        assert record["job"]["name"] == name and "### Post-mortem" in summary, record["job"]


def _phase(cluster: Any, namespace: str, name: str) -> str:
    custom = client.CustomObjectsApi(cluster.api_client())
    job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", name)
    return str(((job.get("status") or {}).get("state") or {}).get("phase") or "")


def _retries(cluster: Any, namespace: str, name: str) -> int:
    custom = client.CustomObjectsApi(cluster.api_client())
    job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "jobs", name)
    return int((job.get("status") or {}).get("retryCount") or 0)


def _evict(cluster: Any, namespace: str, pod: str) -> None:
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespaced_pod_eviction(pod, namespace, client.V1Eviction(
        metadata=client.V1ObjectMeta(name=pod, namespace=namespace)))


# KFP's backend hands RUNNING in each of these (docs/kfp.md, "What the exit handler is handed");
# the job is put in the phase the scenario leaves it in, for real, and the handler decides by it.
@pytest.mark.parametrize("scenario", ["serve-skipped-success", "training-failed", "train-pod-evicted"])
def test_an_exit_handler_handed_running_decides_from_the_job(
        cluster: Any, namespace: str, tmp_path: Path, scenario: str) -> None:
    run_id = f"running-{scenario}"
    if scenario == "serve-skipped-success":
        # serve_model=false: the last task (serve) is skipped, nothing moves the group to COMPLETE.
        name = _submit(cluster, namespace, run_id, {})
        wait_for("the job Completed", lambda: _phase(cluster, namespace, name) == "Completed", timeout=120)
        expected = ("succeeded", "none", [name])
    elif scenario == "training-failed":
        # The train step pod OOM-killed / its node lost after its job failed: no launcher reported FAILED.
        name = _submit(cluster, namespace, run_id, behaviour.fail_with(7))
        wait_for("the job Failed", lambda: _phase(cluster, namespace, name) == "Failed", timeout=180)
        expected = ("failed", "deleted", [])
    else:
        # A training pod evicted through the Eviction API (node drain): Volcano restarts the job
        # (PodEvicted -> RestartJob) while the run's train step pod, evicted too, reported nothing.
        name = _submit(cluster, namespace, run_id, behaviour.keep_running())
        wait_for("the job Running", lambda: _phase(cluster, namespace, name) == "Running", timeout=120)
        _evict(cluster, namespace, f"{name}-worker-0")
        wait_for("Volcano's restart of the job", lambda: _retries(cluster, namespace, name) >= 1, timeout=60)
        expected = ("failed", "deleted", [])
    outcome, cleanup, left = expected
    _, written, summary = _finish(cluster, namespace, tmp_path, run_id, "RUNNING", outcome == "succeeded")
    assert (written["result"]["outcome"], written["cleanup"]) == (outcome, cleanup), written["result"]["rule"]
    assert "not an end state" in written["result"]["rule"]
    assert written["job_phase"] in written["result"]["rule"]
    assert _jobs(cluster, namespace) == left
    if scenario == "training-failed":
        # The failed worker is named in the record with its exit code (Volcano deleted the
        # running PS when the job failed: only a watch could have seen it, and none ran here).
        record = json.loads((tmp_path / "outputs" / "post_mortem" / namespace / f"{name}.json").read_text())
        ends = {pod["name"]: (pod.get("end") or {}).get("exit_code") for pod in record["pods"]}
        assert ends.get(f"{name}-worker-0") == 7, record["pods"]


def test_the_exit_handlers_summary_links_the_runs_tensorboard(cluster: Any, namespace: str, tmp_path: Path) -> None:
    from tests.helpers.lifecycle import make_log_pvc
    from volcano_pipelines.steps import ObjectLabels, tensorboard

    run_id = "with-board"
    name = _submit(cluster, namespace, run_id, behaviour.fail_with(7))
    pvc = make_log_pvc(cluster, namespace)
    try:
        board = tensorboard("exit-board", log_pvc=next(pvc), object_labels=ObjectLabels(run_id=run_id), namespace=namespace,
                            connection=Connection(str(cluster.kubeconfig)), wait=False, service_type="NodePort")
        wait_for("the job Failed", lambda: _phase(cluster, namespace, name) == "Failed", timeout=180)
        _, written, summary = _finish(cluster, namespace, tmp_path, run_id, "FAILED", False)
    finally:
        next(pvc, None)
    found = written["result"]["tensorboard"]
    assert found["name"] == "exit-board" and found["urls"]["cluster"] == board.urls["cluster"], (found, board.urls)
    # The node port the Service got, on the node its pod runs on (which the step, not waiting
    # for the pod, could not name yet).
    assert board.node_port and found["url"] == found["urls"]["node_port"], (found, board)
    assert found["url"].endswith(f":{board.node_port}/") and f"| TensorBoard | [{found['url']}]({found['url']}) |" in summary
    assert "### Post-mortem" in summary and summary.index("TensorBoard") < summary.index("### Post-mortem")


# A run terminated while `sync --workers` copies: KFP's launcher exits at SIGTERM and the kernel
# kills the sync step with it, so nothing deletes the copy job (docs/kfp.md); the exit handler,
# handed RUNNING after a terminate (or any word), finds it unfinished by the run's labels.
@pytest.mark.parametrize(("state", "on_failure", "cleanup"), [("RUNNING", "delete", "deleted"),
                                                             ("CANCELED", "abort", "aborted"),
                                                             ("FAILED", "keep", "kept")])
def test_a_copy_job_left_unfinished_by_the_sync_step_is_settled_by_the_exit_handler(
        cluster: Any, namespace: str, tmp_path: Path, state: str, on_failure: str, cleanup: str) -> None:
    from volcano_pipelines.volcano.copyjob import CopyJobSpec, build_copy_job, copy_job_name
    from volcano_pipelines.volcano.spec import JobOptions, Role

    run_id = f"copying-{state.lower()}"
    name = copy_job_name(run_id)
    # The copy job the sync step makes, as it makes it (its claim does not exist: it stays unfinished).
    job = JobOptions(name, namespace=namespace, image="runtime:test", queue="default", run_id=run_id,
                     pod_security="restricted")
    client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "jobs", build_copy_job(CopyJobSpec(job, workers=2, claim="missing", subpath=None, role=Role())))
    _, written, summary = _finish(cluster, namespace, tmp_path, run_id, state, False, on_failure=on_failure)
    copy_job = written["result"]["copy_job"]
    assert (copy_job["name"], copy_job["namespace"], copy_job["cleanup"]) == (name, namespace, cleanup), copy_job
    assert written["cleanup"] == "none" and written["job_phase"] == "NotFound"  # no training job yet
    assert f"| copy job of the sync step | {name} ({copy_job['phase']}): {cleanup} |" in summary
    if cleanup == "deleted":
        wait_for("the copy job gone", lambda: _jobs(cluster, namespace) == [], timeout=60)
    elif cleanup == "aborted":
        wait_for("the copy job Aborted", lambda: _phase(cluster, namespace, name) == "Aborted", timeout=60)
    else:
        assert _jobs(cluster, namespace) == [name] and _phase(cluster, namespace, name) != "Aborted"
