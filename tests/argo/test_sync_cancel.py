"""`sync --workers 2` through the shipped `vpipe-sync` WorkflowTemplate under Argo's real
controller, stopped and deleted while the step waits for its copy job, the way Argo and
Kubernetes do it:

* `spec.shutdown: Stop` (what `argo stop` patches): the controller signals the step container,
  emissary forwards SIGTERM to vpipe, whose wait loop applies `on_cancel` (delete) to the copy
  job: no copy job and no copy pod is left, the Workflow fails;
* the Workflow deleted: its step pod is deleted too, and a step losing its pod keeps the copy
  job for the retried step to attach to (tests/argo/test_sync_workers.py), so only the owner
  the step gave the copy job (the Workflow that owns the step's pod, read from that pod) gets
  it deleted: the garbage collector deletes the job and its pods.

Either way the run's plan stays under `<dst>/.vpipe/` for a run with the same id to resume.
The copy pods are made but never scheduled (their node selector matches no node): a copy that
finished first would leave nothing to clean up, and a real one on this machine can end before
Argo has signalled the step. What a copy pod killed mid-file leaves (nothing visible but whole
files; the retry completes it): tests/argo/test_sync_workers.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.argo_pipelines import CONF_DIR, CONF_PATCH, sync_template_over_hdfs
from tests.helpers.training import _host_path_pvc, toleration
from tests.helpers.workflows import GROUP, VERSION, _why, jobs, submit_from_template, wait_finished, workflow
from tests.integration.waiting import wait_for
from tests.storage.fixtures import POD_HDFS_NAME
from tests.storage.trees import put_tree, read_tree
from volcano_pipelines.transfer.partition import run_dir
from volcano_pipelines.volcano.copyjob import copy_job_name

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers, pytest.mark.hdfs,
              pytest.mark.gluster, pytest.mark.timeout(600)]

HOW = ("stop", "delete")
NOWHERE = "vpipe.test/no-such-node=true"  # the copy pods' node selector: made, never scheduled


def copy_pods(core: Any, namespace: str, job: str) -> list[Any]:
    return core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items


def test_a_stopped_or_deleted_sync_workflow_leaves_no_copy_job_and_keeps_its_plan(
        cluster: Any, namespace: str, real_node: Any, argo: Any, hdfs_for_pods: Any, gluster: Any) -> None:
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    objects = sync_template_over_hdfs(api, namespace, real_node, hdfs_for_pods)
    files = {f"d{i % 2}/f{i}.txt": os.urandom(1000 + i) for i in range(6)}
    put_tree(hdfs_for_pods.client(), f"/datasets/{namespace}", files)
    volume = gluster.fresh_dir(f"{namespace}-cancel")
    volume.chmod(0o777)  # the images' uid 1000 writes (a hostPath PV has no fsGroup)
    _host_path_pvc(core, namespace, "data", volume, real_node.name)
    try:
        names = {how: submit_from_template(api, namespace, real_node, "vpipe-sync", f"sync-{how}-", {
            "src": f"hdfs://{POD_HDFS_NAME}:{hdfs_for_pods.rpc_port}/datasets/{namespace}",
            "hadoop-conf-dir": CONF_DIR, "dst": f"/data/{how}", "data-pvc": "data", "workers": "2",
            "node-selector": NOWHERE, "tolerations": toleration(real_node),
            "cpu": "100m", "memory": "512Mi", "queue": "default"}, podSpecPatch=json.dumps(CONF_PATCH))
            for how in HOW}
        run_ids = {how: workflow(api, namespace, names[how])["metadata"]["uid"] for how in HOW}
        job_names = {how: copy_job_name(run_ids[how]) for how in HOW}

        def copy_job(how: str) -> dict[str, Any] | None:
            found = jobs(api, namespace).get(job_names[how])
            run = workflow(api, namespace, names[how])
            if found is None and run.get("status", {}).get("phase") in ("Failed", "Error", "Succeeded"):
                raise AssertionError(f"the workflow ended before its copy job was made: {_why(run)}")
            return found

        made = {how: wait_for(f"the copy job of {names[how]}", lambda how=how: copy_job(how), timeout=240)
                for how in HOW}
        for how in HOW:  # Volcano made the copy pods (Pending: no node matches)
            wait_for(f"the copy pods of {job_names[how]}",
                     lambda how=how: len(copy_pods(core, namespace, job_names[how])) == 2, timeout=120)
        started = {"stop": time.monotonic()}
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", names["stop"],
                                              {"spec": {"shutdown": "Stop"}})
        started["delete"] = time.monotonic()
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", names["delete"])
        took: dict[str, dict[str, float]] = {how: {} for how in HOW}

        def all_gone() -> bool:
            present = jobs(api, namespace)
            for how in HOW:
                now = time.monotonic() - started[how]
                if job_names[how] not in present:
                    took[how].setdefault("job", now)
                    if not copy_pods(core, namespace, job_names[how]):
                        took[how].setdefault("pods", now)
            return all("pods" in t for t in took.values())

        wait_for("no copy job and no copy pod left", all_gone, timeout=240, interval=0.5, explain=lambda: str(took))
        stopped = wait_finished(api, namespace, names["stop"], timeout=180)
    finally:
        support.delete_cluster_scoped(api, objects)
        core.delete_persistent_volume(f"{namespace}-data"[:63])
    # The copy job was owned by the Workflow, read from the step's pod (the template leaves owner empty).
    owners = [(o["kind"], o["name"], o["uid"]) for o in made["delete"]["metadata"].get("ownerReferences", [])]
    assert owners == [("Workflow", names["delete"], run_ids["delete"])], owners
    assert stopped["status"]["phase"] == "Failed", _why(stopped)
    for how in HOW:
        dest = volume / how
        assert read_tree(dest) == {}  # no copy pod ran
        assert Path(run_dir(str(dest), run_ids[how])).is_dir()  # kept for a run with the same id to resume
        print(f"\n{how}: copy job deleted {took[how]['job']:.1f} s, no copy pod {took[how]['pods']:.1f} s after "
              f"{'the patch of spec.shutdown' if how == 'stop' else 'the Workflow was deleted'}", end="")
    print()
