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
from volcano_pipelines.steps import train_tf

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
                          "summary": artifact("summary", "system.Markdown")},
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
CASES = {
    "COMPLETE": ("succeeded", "none"),  # KFP backend, successful run
    "CACHED": ("succeeded", "none"),
    "SUCCEEDED": ("succeeded", "none"),  # kfp.local
    "Succeeded": ("succeeded", "none"),  # Argo's {{workflow.status}}
    "FAILED": ("failed", "deleted"),
    "CANCELED": ("failed", "deleted"),
    "Error": ("failed", "deleted"),
    "RUNNING": ("unknown", "kept"),  # not an end state: never delete on a guess
}


@pytest.mark.parametrize("state", list(CASES))
def test_the_exit_handler_keeps_or_deletes_the_job_by_the_state_it_is_handed(
        cluster: Any, namespace: str, tmp_path: Path, state: str) -> None:
    outcome, cleanup = CASES[state]
    run_id = f"exit-{state.lower()}"
    submitted = train_tf("exit", run_id=run_id, image="trainer:test", code_url="https://example.com/code/",
                         workers=1, ps=1, namespace=namespace, kubeconfig=str(cluster.kubeconfig), wait=False,
                         pod_labels={"worker": behaviour.keep_running()})
    assert _jobs(cluster, namespace) == [submitted.name]

    proc, outputs = _run_component(tmp_path, {
        "run_id": run_id, "namespace": namespace, "kubeconfig": str(cluster.kubeconfig),
        "status": {"state": state, "pipelineJobResourceName": f"projects/p/pipelineJobs/{run_id}",
                   "pipelineTaskName": "exit-handler-1",
                   "error": {"code": 0 if outcome == "succeeded" else 1, "message": ""}},
    })
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = json.loads((outputs / "executor_output.json").read_text())["parameterValues"]
    assert written["pipeline_state"] == state
    assert written["cleanup"] == cleanup
    assert written["result"]["outcome"] == outcome
    assert written["job_phase"] not in ("", "NotFound")
    summary = (outputs / "summary").read_text()
    assert f"| cleanup of the training job | {cleanup} |" in summary
    if outcome == "unknown":
        assert "unknown state: the training job was kept" in summary
        assert "neither a success" in proc.stdout + proc.stderr  # the warning in the pod log
    assert _jobs(cluster, namespace) == ([] if cleanup == "deleted" else [submitted.name])
