"""KFP's terminate, by its own mechanism, under Argo v4.0.5's real controller with every pod on
the real node: KFP's API server terminates a run by setting its Workflow's
`activeDeadlineSeconds` to 0 (KFP 2.17 `backend/src/apiserver/resource/resource_manager.go`),
and Argo treats that as a deadline, not as `shutdown: Terminate`: the running step is stopped
and the exit hook still runs (`workflow/controller/exit_handler.go`).

The Workflow is shaped like KFP's compiled DAG (`argocompiler`): a root DAG whose one task is
the `exit-handler-1` group, carrying the exit handler as its `hooks.exit`. The group's step is
the train step waiting for its Volcano Job; the hook runs `finish_run` handed `RUNNING`, the
state KFP's backend hands the exit handler of a terminated run (the killed launcher never
updated the group's ML Metadata state: docs/kfp.md). KFP's driver and launcher are not run
(no KFP backend can run here): the hook calls the step function with exactly that state.

Then: the train step was stopped (SIGTERM), the hook ran and Succeeded, it decided from the job
(unfinished at the exit handler: the run was cancelled) and deleted it: no Volcano Job and no
training pod left. The shipped Argo pipeline past its workflow deadline runs its own exit
handler (report, cleanup) with the same result."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.argo_pipelines import follow, pipeline_parameters, stage_dataset, storage, submit_pipeline, task_nodes
from tests.helpers.workflows import GROUP, VERSION, _why, jobs, placement, running, submit, training_pods, wait_finished, workflow
from tests.integration.waiting import wait_for
from volcano_pipelines.images import RUNTIME_IMAGE, TF_TRAINER_IMAGE
from volcano_pipelines.objects.podspec import mesh_opt_out

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers]

SECURITY = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# What the exit hook runs: the exit handler's step, handed what KFP's backend hands it.
FINISH = ("import json, sys; from volcano_pipelines.steps import finish_run; "
          "r = finish_run(run_id=sys.argv[1], namespace=sys.argv[2], pipeline_state='RUNNING', on_failure='delete'); "
          "print('REPORT ' + json.dumps(r.to_dict()))")


@pytest.fixture
def shipped(pipelines_shipped: Any) -> Any:
    """The pipeline's objects shipped to the namespace (tests/argo/conftest.py: pipelines_shipped)."""
    return pipelines_shipped


def kfp_shaped_workflow(namespace: str, real_node: Any, url: str) -> dict[str, Any]:
    taint = real_node.taint
    train = ["python3", "-m", "volcano_pipelines", "train", "tf", "--name", "terminated", "--run-id",
             "{{workflow.uid}}", "--namespace", namespace, "--image", TF_TRAINER_IMAGE, "--code-url", f"{url}/tiny/",
             "--ps", "1", "--workers", "1", "--ps-cpu", "20m", "--worker-cpu", "20m", "--ps-memory", "128Mi",
             "--worker-memory", "128Mi", "--env", "TINY_WORK_SECONDS=600", "--queue", "default",
             "--node-selector", f"{real_node.label}={real_node.label_value}",
             "--toleration", f"{taint['key']}={taint['value']}:{taint['effect']}", "--timeout", "900",
             # Under KFP's launcher the step's own cleanup never runs: the launcher exits at SIGTERM
             # and the kernel kills the step with it (docs/kfp.md). Keeping the job on SIGTERM
             # leaves it exactly as that killed step would, for the exit handler to find.
             "--on-cancel", "keep"]

    def container(name: str, command: list[str]) -> dict[str, Any]:
        return {"name": name, "container": {"image": RUNTIME_IMAGE, "imagePullPolicy": "IfNotPresent",
                                            "command": command, "securityContext": CONTAINER_SECURITY,
                                            "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}}}}

    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"generateName": "kfp-shaped-"},
        "spec": {
            "entrypoint": "entrypoint",
            "serviceAccountName": "vpipe-runner",
            "securityContext": SECURITY,
            "podMetadata": {"labels": mesh_opt_out(False), "annotations": mesh_opt_out(False)},
            **placement(real_node),
            "templates": [
                {"name": "entrypoint", "dag": {"tasks": [
                    {"name": "exit-handler-1", "template": "exit-handler-1",
                     "hooks": {"exit": {"template": "exit-handler"}}},
                ]}},
                {"name": "exit-handler-1", "dag": {"tasks": [{"name": "train-tf", "template": "train-tf"}]}},
                container("train-tf", train),
                container("exit-handler", ["python3", "-c", FINISH, "{{workflow.uid}}", namespace]),
            ],
        },
    }


def test_a_run_terminated_by_a_zero_deadline_is_cleaned_up_by_its_exit_handler(
        cluster: Any, namespace: str, real_node: Any, argo: Any, tmp_path: Path) -> None:
    api = cluster.api_client()
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    try:
        with support.code_server(real_node.gateway_ip, support.tiny_code(tmp_path)) as url:
            name = str(submit(api, namespace, kfp_shaped_workflow(namespace, real_node, url))["metadata"]["name"])
            wait_for("the job Running", lambda: running(api, namespace, "terminated"), timeout=300,
                     explain=lambda: _why(workflow(api, namespace, name)))
            # KFP's TerminateRun: the Workflow's deadline set to 0.
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", name,
                                                  {"spec": {"activeDeadlineSeconds": 0}})
            finished = wait_finished(api, namespace, name, timeout=300)
            wait_for("no job and no training pod left",
                     lambda: not jobs(api, namespace) and not training_pods(core, namespace, "terminated"), timeout=120)
    finally:
        support.delete_cluster_scoped(api, objects)
    assert finished["status"]["phase"] == "Failed", _why(finished)  # a deadline fails the run
    by_template: dict[str, list[dict[str, Any]]] = {}
    for entry in finished["status"]["nodes"].values():
        by_template.setdefault(entry.get("templateName", ""), []).append(entry)
    (train,) = by_template["train-tf"]
    assert train["phase"] in ("Failed", "Error"), _why(finished)
    (hook,) = by_template["exit-handler"]
    assert hook["phase"] == "Succeeded", _why(finished)
    logs = [core.read_namespaced_pod_log(pod.metadata.name, namespace, container="main")
            for pod in core.list_namespaced_pod(namespace, label_selector=f"workflows.argoproj.io/workflow={name}").items]
    (report_line,) = [line for log in logs for line in log.splitlines() if line.startswith("REPORT ")]
    report = json.loads(report_line.removeprefix("REPORT "))
    assert report["pipeline_state"] == "RUNNING"
    assert (report["outcome"], report["cleanup"]) == ("failed", "deleted"), report
    assert "unfinished at the exit handler" in report["rule"], report["rule"]
    assert report["job"]["name"] == "terminated"


# The shipped pipeline's run deadline in this test: time for sync and the job's start (18 s in a
# full CI run; about 4 minutes was seen once on a 2-core machine loaded by other test sessions
# beside a CI run), then the deadline ends the run mid-training. The test waits it out: keep it
# short (300 s made this the longest test of CI). The time the job took to run is printed.
RUN_DEADLINE_SECONDS = 150


@pytest.mark.hdfs
@pytest.mark.gluster
@pytest.mark.timeout(1200)
def test_the_argo_pipeline_past_its_deadline_runs_its_exit_handler_and_cleans_up(
        cluster: Any, namespace: str, pipeline_node: Any, code_url: str, hdfs_for_pods: Any, gluster: Any,
        argo: Any, shipped: Any, tmp_path: Path) -> None:
    """The shipped `vpipe-train-and-serve` ended by a workflow deadline while it trains (the
    pipelines' own deadline, here short): the training step is stopped, the workflow fails, the
    exit handler's report and cleanup run, and no Volcano Job or training pod is left.

    The deadline is the Workflow's own from its submission. Patched onto a running Workflow made
    from a WorkflowTemplate reference (as KFP's terminate patches its inline Workflows), Argo
    v4.0.5 did not enforce it here within 8 minutes; KFP's Workflows are inline, for which the
    patch works (the test above)."""
    api, pvs = shipped
    _dataset, src = stage_dataset(hdfs_for_pods, namespace, tmp_path)
    volumes = storage(api, pvs, namespace, gluster, pipeline_node, "cut")
    parameters = pipeline_parameters(pipeline_node, "cut", f"{code_url}/tf-ps/", src, volumes, "http://unused")
    parameters["args"] = "\n".join(["--api=tf2", "--steps=1000000", "--threads=1", "--log_every=100",
                                    "--checkpoint_every=1000", "--model_name=cut"])
    name = submit_pipeline(api, namespace, pipeline_node, parameters, activeDeadlineSeconds=RUN_DEADLINE_SECONDS)
    submitted = time.monotonic()
    wait_for("the job Running before the run's deadline", lambda: running(api, namespace, "cut"),
             timeout=RUN_DEADLINE_SECONDS - 20, explain=lambda: _why(workflow(api, namespace, name)))
    print(f"\nthe job ran {time.monotonic() - submitted:.0f} s after the submission (deadline {RUN_DEADLINE_SECONDS} s)")
    finished, _pods = follow(api, namespace, [name], timeout=900)
    wf = finished[name]
    assert wf["status"]["phase"] == "Failed", _why(wf)
    nodes = task_nodes(wf)
    assert nodes["train"]["phase"] in ("Failed", "Error"), _why(wf)
    assert nodes["report"]["phase"] == "Succeeded" and nodes["cleanup"]["phase"] == "Succeeded", \
        {k: n["phase"] for k, n in nodes.items()}
    core = client.CoreV1Api(api)
    wait_for("no job and no training pod left",
             lambda: "cut" not in jobs(api, namespace) and not training_pods(core, namespace, "cut"), timeout=120)
