"""The shipped `vpipe-train-tf` WorkflowTemplate under Argo v4.0.5's real controller, every
pod on the real node, faults caused the way Argo and Kubernetes cause them:

* `spec.shutdown: Stop` and `Terminate` in the middle of training (what `argo stop` /
  `argo terminate` patch): the controller execs `argoexec kill 15 1` in the step pod, emissary
  forwards SIGTERM to the launcher's process group, vpipe deletes its job. No Volcano Job and no
  training pod is left; the time that takes is printed;
* the Workflow deleted in the middle of training: the garbage collector deletes the job
  through its ownerReference;
* (the train step's pod deleted in the middle of training: tests/argo/test_lost_pod.py);
* a timeout that is not whole seconds: the Workflow fails with the step's exit-2 message, not
  a pod-creation parse error.

Every request of the step pods and of argoexec (the ServiceAccount `vpipe-runner`) was granted.
Test-only settings: the tiny run.sh (tests/argo/support.py), the real node's selector and
toleration, small CPU and memory requests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.workflows import (
    GROUP,
    VERSION,
    _why,
    jobs,
    running,
    step_pods,
    submit_train,
    train_parameters,
    training_pods,
    wait_finished,
)
from tests.integration.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers]


def test_stop_terminate_and_delete_leave_no_job_and_no_training_pod(cluster: Any, namespace: str, real_node: Any,
                                                                     shipped: Any, tmp_path: Path) -> None:
    plane = cluster.require_local()
    api, core = shipped, client.CoreV1Api(shipped)
    custom = client.CustomObjectsApi(api)
    with support.code_server(real_node.gateway_ip, support.tiny_code(tmp_path)) as url:
        names = {how: submit_train(api, namespace, real_node, train_parameters(real_node, url, f"f-{how}", 600))
                 for how in ("stop", "terminate", "delete")}
        for how in names:
            wait_for(f"job f-{how} Running", lambda how=how: running(api, namespace, f"f-{how}"), timeout=300)
        owners = {how: jobs(api, namespace)[f"f-{how}"]["metadata"].get("ownerReferences") for how in names}
        started: dict[str, float] = {}
        for how in ("stop", "terminate"):
            started[how] = time.monotonic()
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", names[how],
                                                  {"spec": {"shutdown": how.capitalize()}})
        started["delete"] = time.monotonic()
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", names["delete"])
        # One poll for all three, so each time is its own (not the sum of the waits before it).
        took: dict[str, dict[str, float]] = {how: {} for how in names}

        def all_gone() -> bool:
            present = jobs(api, namespace)
            for how in names:
                now = time.monotonic() - started[how]
                if f"f-{how}" not in present:
                    took[how].setdefault("job", now)
                    if not training_pods(core, namespace, f"f-{how}"):
                        took[how].setdefault("pods", now)
            return all("pods" in t for t in took.values())

        wait_for("no job and no training pod left", all_gone, timeout=240, interval=0.5,
                 explain=lambda: str(took))
        ended = {how: wait_finished(api, namespace, names[how], timeout=180) for how in ("stop", "terminate")}

    for how in names:
        (owner,) = owners[how]
        assert owner["kind"] == "Workflow" and owner["name"] == names[how] and owner["blockOwnerDeletion"] is False
    for how, wf in ended.items():
        assert wf["status"]["phase"] == "Failed", _why(wf)
        (owner,) = owners[how]
        assert owner["uid"] == wf["metadata"]["uid"]
    refused, _allowed = support.service_account_accesses(plane.audit_log, namespace, "vpipe-runner")
    assert refused == [], f"refused: {refused}"
    for how in names:
        print(f"\n{how}: job deleted {took[how]['job']:.1f} s, no training pod {took[how]['pods']:.1f} s after "
              f"{'the patch of spec.shutdown' if how != 'delete' else 'the Workflow was deleted'}", end="")
    print()


def test_a_timeout_that_is_not_whole_seconds_fails_with_the_steps_message(cluster: Any, namespace: str,
                                                                           real_node: Any, shipped: Any) -> None:
    api = shipped
    name = submit_train(api, namespace, real_node, {**train_parameters(real_node, "http://unused", "badtimeout", 5),
                                                    "timeout": "1.5"})
    finished = wait_finished(api, namespace, name, timeout=180)
    assert finished["status"]["phase"] == "Failed", _why(finished)
    (node,) = [n for n in finished["status"]["nodes"].values() if n.get("type") == "Pod"]
    assert node.get("outputs", {}).get("exitCode") == "2", node  # not retried: exit 2 is final
    core = client.CoreV1Api(api)
    (pod,) = step_pods(core, namespace, name)
    log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="main")
    assert "invalid --timeout=1.5: whole seconds" in log, (node, log)
    assert jobs(api, namespace) == {}  # nothing was created
