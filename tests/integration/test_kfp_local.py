"""The KFP pipelines run for real with kfp.local (SubprocessRunner, no containers): every
component body runs in its own process, sync copies a local directory, train submits to the
local control plane (kube-apiserver + Volcano + kwok), the exit handler reports and cleans up.
What kfp.local cannot show: the kfp-kubernetes settings (PVC mount, pull secrets) and the
runtime image; the unit tests check those in the compiled IR."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests import needs
from tests.cluster import behaviour
from tests.helpers.lifecycle import make_log_pvc
from tests.integration.waiting import wait_for

pytestmark = pytest.mark.integration
kfp_local = needs.module("kfp.local", "the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")

import volcano_pipelines
from tests.helpers.kfp_local import drop_unset_optional_inputs
from volcano_pipelines.kfp import components
from volcano_pipelines.kfp.pipelines import train_and_serve

GROUP, VERSION = "batch.volcano.sh", "v1alpha1"
RUN_LABEL = "volcano-pipelines/run"
CODE_URL = "https://example.com/code/"  # never fetched: kwok runs no container


@pytest.fixture
def local_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """kfp.local in this process; task outputs under the returned directory. The task
    processes import the volcano_pipelines this test imports."""
    from kfp.local import config, executor_input_utils

    monkeypatch.setattr(executor_input_utils, "executor_input_to_dict", drop_unset_optional_inputs())
    source = str(Path(volcano_pipelines.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])))
    root = tmp_path / "kfp-outputs"
    kfp_local.init(runner=kfp_local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=False)
    yield root
    config.LocalExecutionConfig.instance = None


def _task_dir(root: Path, task: str) -> Path:
    found = sorted(root.glob(f"*/{task}"))
    assert len(found) == 1, f"expected one output directory of task {task}, found {found}"
    return found[0]


def _outputs(root: Path, task: str) -> dict[str, Any]:
    """A finished task's output parameters and artifact metadata (executor_output.json)."""
    data = json.loads((_task_dir(root, task) / "executor_output.json").read_text())
    out = dict(data.get("parameterValues") or {})
    for name, artifacts in (data.get("artifacts") or {}).items():
        out[name] = artifacts["artifacts"][0].get("metadata") or {}
    return out


def _summary(root: Path, task: str) -> str:
    return (_task_dir(root, task) / "summary").read_text()


def _jobs(cluster: Any, namespace: str) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(cluster.api_client())
    return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "jobs")["items"]


@pytest.fixture
def data_pvc(cluster: Any, namespace: str) -> Iterator[str]:
    yield from make_log_pvc(cluster, namespace, "data")


def _dataset(tmp_path: Path) -> Path:
    src = tmp_path / "dataset"
    (src / "train").mkdir(parents=True)
    for i in range(3):
        (src / "train" / f"part-{i}.tfrecord").write_bytes(bytes([i]) * (1000 + i))
    (src / "labels.txt").write_text("0\n1\n")
    return src


@pytest.mark.parametrize("kind", ["tf", "mpi"])
def test_train_and_serve_runs_end_to_end(cluster: Any, namespace: str, local_runs: Path, tmp_path: Path,
                                         log_pvc: str, data_pvc: str, kind: str) -> None:
    src, staged = _dataset(tmp_path), tmp_path / "staged"
    shape = {"tf": {"workers": 2, "ps": 1}, "mpi": {"workers": 2, "command": ["python", "train.py"]}}[kind]
    pipeline = train_and_serve(kind, data_mount=str(staged))
    # No TF Serving binary can run here (kwok runs no container): the serve step is off.
    extra = {"serve_model": False} if kind == "tf" else {}
    # queue: the test cluster has Volcano's own queues only, not the capped `vpipe` queue that
    # manifests/cluster creates and the pipelines default to.
    pipeline(model_name=f"kfp-{kind}", dataset_url=str(src), data_pvc=data_pvc, log_pvc=log_pvc, image="trainer:test",
             code_url=CODE_URL, kubeconfig=str(cluster.kubeconfig), namespace=namespace, queue="default", **shape,
             **extra)

    # sync really copied the dataset where the data PVC would be mounted, into the model's own
    # directory, which is the one directory of the PVC the training pods mount.
    assert (staged / f"kfp-{kind}" / "train" / "part-2.tfrecord").read_bytes() == bytes([2]) * 1002
    assert sorted(p.name for p in staged.iterdir()) == [f"kfp-{kind}"]
    synced = _outputs(local_runs, "sync")
    assert synced["copied"] == 4 and synced["failed"] == 0 and synced["bytes_copied"] == 3003 + 4
    assert synced["metrics"]["files_copied"] == 4 and synced["metrics"]["bytes_copied"] == 3007
    assert "| files copied | 4 |" in _summary(local_runs, "sync")

    # train submitted the job, waited for it, and reports it.
    trained = _outputs(local_runs, f"train-{kind}")
    assert trained["phase"] == "Completed" and trained["succeeded"] is True
    assert (trained["job_name"], trained["job_namespace"]) == (f"kfp-{kind}", namespace)
    assert trained["duration_seconds"] > 0
    assert trained["metrics"]["duration_seconds"] == trained["duration_seconds"]
    assert "retries" in trained["metrics"]
    summary = _summary(local_runs, f"train-{kind}")
    assert f"## Training job `{namespace}/kfp-{kind}`: Completed (succeeded)" in summary
    assert "| worker |" in summary if kind == "tf" else "| mpimaster |" in summary

    # One job, labelled with the run's identity, which the exit handler reports too.
    jobs = _jobs(cluster, namespace)
    assert [job["metadata"]["name"] for job in jobs] == [f"kfp-{kind}"]
    run_id = jobs[0]["metadata"]["labels"][RUN_LABEL]
    assert run_id and run_id == trained["run_id"] and "{{" not in run_id
    assert jobs[0]["status"]["state"]["phase"] == "Completed"
    data_mounts = {}
    for task in jobs[0]["spec"]["tasks"]:
        pod = task["template"]["spec"]
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
        data_mounts[task["name"]] = [(m.get("subPath"), m.get("readOnly")) for m in pod["containers"][0]["volumeMounts"]
                                     if claims.get(m["name"]) == data_pvc]
    mounted = {"tf": ("worker",), "mpi": ("mpimaster", "mpiworker")}[kind]
    assert {task: data_mounts[task] for task in mounted} == {task: [(f"kfp-{kind}", True)] for task in mounted}
    finished = _outputs(local_runs, "finish-run")
    assert finished["pipeline_state"] == "SUCCEEDED"
    assert (finished["job_phase"], finished["cleanup"]) == ("Completed", "none")
    assert finished["result"]["run_id"] == run_id
    assert f"## Run `{run_id}`: SUCCEEDED" in _summary(local_runs, "finish-run")


def test_failed_training_fails_the_run_and_the_exit_handler_cleans_up(cluster: Any, namespace: str,
                                                                      local_runs: Path, tmp_path: Path,
                                                                      log_pvc: str, data_pvc: str) -> None:
    # No step retries here: each would only attach to the same failed job (after a back-off).
    pipeline = train_and_serve("tf", data_mount=str(tmp_path / "staged"), step_retries=0)
    pipeline(model_name="kfp-fails", dataset_url=str(_dataset(tmp_path)), data_pvc=data_pvc, log_pvc=log_pvc,
             serve_model=False, image="trainer:test", queue="default",
             code_url=CODE_URL, kubeconfig=str(cluster.kubeconfig), namespace=namespace, workers=2, max_retry=1,
             pod_labels={"worker": behaviour.fail_with(3)})

    # The train step failed (no outputs), but wrote why.
    train_dir = _task_dir(local_runs, "train-tf")
    assert not (train_dir / "executor_output.json").exists()
    summary = _summary(local_runs, "train-tf")
    assert "Failed (did not succeed)" in summary and "| exit code | 3 |" in summary

    # The exit handler saw the failure, reported the job and deleted it (on_failure=delete).
    finished = _outputs(local_runs, "finish-run")
    assert finished["pipeline_state"] == "FAILED"
    assert (finished["job_phase"], finished["cleanup"]) == ("Failed", "deleted")
    assert finished["result"]["job"]["failure"]["exit_code"] == 3
    report = _summary(local_runs, "finish-run")
    assert "FAILED" in report and "| cleanup of the training job | deleted |" in report
    assert _jobs(cluster, namespace) == []


def test_a_retried_train_step_attaches_to_its_job(cluster: Any, namespace: str, local_runs: Path) -> None:
    arguments = {"name": "kfp-attach", "run_id": "kfp-run-42", "image": "trainer:test", "code_url": CODE_URL,
                 "kubeconfig": str(cluster.kubeconfig), "namespace": namespace, "workers": 1}
    first = components.train_tf(**arguments)
    second = components.train_tf(**arguments)  # what KFP does when it retries the step
    assert first.outputs["result"]["created"] is True
    assert second.outputs["result"]["created"] is False
    assert first.outputs["phase"] == second.outputs["phase"] == "Completed"
    jobs = _jobs(cluster, namespace)
    assert len(jobs) == 1 and jobs[0]["metadata"]["labels"][RUN_LABEL] == "kfp-run-42"


def test_a_step_given_no_run_id_takes_the_kfp_run_and_its_workflow_from_its_pod(
        cluster: Any, namespace: str, local_runs: Path, tmp_path: Path, argo_crds: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipeline of a user's own, built from components/*.yaml, that passes no run_id: KFP's
    backend labels every pod of a run `pipeline/runid=<run id>`, gives each step container its
    pod's name ($KFP_POD_NAME), and the pod belongs to the run's Argo Workflow. The step takes
    the run's id, so the step run again (a retry) attaches to the job its first attempt created
    instead of making a second one; and the job belongs to the Workflow, so deleting the run
    deletes the job (the only cleanup of a cancelled KFP run the step can count on)."""
    import yaml

    from tests.helpers.argo_crds import owner_workflow

    core = client.CoreV1Api(cluster.api_client())
    workflow = owner_workflow(cluster, namespace, "kfp-run")
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "step-pod", "labels": {"pipeline/runid": "kfp-run-77"},
                     "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                          "name": workflow["name"], "uid": workflow["uid"], "controller": True}]},
        # Never scheduled: only its metadata is read.
        "spec": {"containers": [{"name": "main", "image": "runtime:test"}], "nodeSelector": {"vpipe.test/none": "x"}}})
    # The step pod's view: its own namespace is the kubeconfig context's (in-cluster: the pod's).
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KFP_POD_NAME", "step-pod")
    arguments = {"name": "kfp-own", "image": "trainer:test", "code_url": CODE_URL, "kubeconfig": str(kubeconfig),
                 "workers": 1}
    first = components.train_tf(**arguments)
    second = components.train_tf(**arguments)
    assert first.outputs["run_id"] == second.outputs["run_id"] == "kfp-run-77"
    assert (first.outputs["result"]["created"], second.outputs["result"]["created"]) == (True, False)
    jobs = _jobs(cluster, namespace)
    assert [(j["metadata"]["name"], j["metadata"]["labels"][RUN_LABEL]) for j in jobs] == [("kfp-own", "kfp-run-77")]
    assert [(o["kind"], o["name"], o["uid"]) for o in jobs[0]["metadata"]["ownerReferences"]] == [
        ("Workflow", workflow["name"], workflow["uid"])]

    client.CustomObjectsApi(cluster.api_client()).delete_namespaced_custom_object(
        "argoproj.io", "v1alpha1", namespace, "workflows", workflow["name"])
    wait_for("the job garbage-collected with its run's Workflow", lambda: _jobs(cluster, namespace) == [], timeout=60)
