"""What the step keeps of each pod it lists or watches (k8s/pods.py slim_pod): everything it
reads, a tenth of the bytes. A training job's pod carries the entry point's script in every
container: 22 KB of JSON a pod, 2.4 GB in the typed client at 11,000 pods."""

from __future__ import annotations

import json
from typing import Any

from volcano_pipelines.k8s.pods import default_container, slim_pod
from volcano_pipelines.postmortem.record import build_record
from volcano_pipelines.volcano.spec import JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.status import pod_end, pod_failure, pod_task
from volcano_pipelines.volcano.tf import build_tf_job

JOB = build_tf_job(TFJobSpec(job=JobOptions(name="mnist"), ps=Role(), worker=Role(replicas=2)))


def pod_of(task: str, index: int, phase: str, exit_code: int | None) -> dict[str, Any]:
    """A pod as the API returns it: the task's template, Volcano's metadata, the kubelet's status."""
    template = next(t for t in JOB["spec"]["tasks"] if t["name"] == task)["template"]
    terminated = {"terminated": {"exitCode": exit_code, "reason": "Error", "finishedAt": "2026-01-01T00:01:48Z"}}
    return {
        "metadata": {"name": f"mnist-{task}-{index}", "uid": f"uid-{task}-{index}", "namespace": "ns",
                     "creationTimestamp": "2026-01-01T00:00:10Z", "labels": {**template["metadata"]["labels"],
                                                                           "volcano.sh/job-name": "mnist"},
                     "annotations": {"volcano.sh/task-spec": task, "kubectl.kubernetes.io/default-container": "tensorflow"},
                     "managedFields": [{"manager": "vc-controller-manager", "fieldsV1": {"f:spec": {"x": {}}}}]},
        "spec": {**template["spec"], "nodeName": "node-1"},
        "status": {"phase": phase, "containerStatuses": [
            {"name": "tensorflow", "image": "vpipe/tf:1", "restartCount": 0,
             "state": terminated if exit_code is not None else {"running": {"startedAt": "2026-01-01T00:00:20Z"}}}]},
    }


PODS = [pod_of("worker", 1, "Failed", 1), pod_of("worker", 0, "Running", None), pod_of("ps", 0, "Failed", 137)]


def test_a_slim_pod_is_a_tenth_of_the_pod_and_keeps_no_script_or_environment() -> None:
    full, slim = PODS[0], slim_pod(PODS[0])
    assert len(json.dumps(slim)) * 5 < len(json.dumps(full)), (len(json.dumps(slim)), len(json.dumps(full)))
    assert slim["spec"] == {"nodeName": "node-1", "containers": [{"name": "tensorflow", "image": full["spec"]["containers"][0]["image"]}]}
    assert "managedFields" not in slim["metadata"] and slim["status"] == full["status"]
    assert {k: v for k, v in full["metadata"].items() if k != "managedFields"} == slim["metadata"]


def test_what_the_step_reads_of_a_pod_is_the_same_slim() -> None:
    """The post-mortem's pod entries, the failure, each pod's end, task and default container."""
    slim = [slim_pod(p) for p in PODS]
    for slimmed, full in zip(slim, PODS, strict=True):
        assert pod_task(slimmed) == pod_task(full) and default_container(slimmed) == default_container(full)
        assert pod_end(slimmed) == pod_end(full)
    assert pod_failure(slim) == pod_failure(PODS)
    record = {"collected_at": "2026-01-01T00:02:01Z"}
    assert build_record(JOB, slim, [], {}, **record)["pods"] == build_record(JOB, PODS, [], {}, **record)["pods"]


def test_slim_pods_parsed_apart_share_their_short_strings() -> None:
    """Each page of a list is parsed on its own: the same label values, phases and timestamps
    come back as new strings every time. Slim pods keep one of each (a third less at 11,000 pods);
    a long message stays the pod's own."""
    message = "x" * 500
    first, second = (slim_pod(json.loads(json.dumps({**PODS[1], "status": {**PODS[1]["status"], "message": message}})))
                     for _ in range(2))
    assert first == second and first["status"]["message"] == message
    assert first["status"]["phase"] is second["status"]["phase"]
    assert first["metadata"]["labels"]["volcano.sh/job-name"] is second["metadata"]["labels"]["volcano.sh/job-name"]
    started = "startedAt"
    assert (first["status"]["containerStatuses"][0]["state"]["running"][started]
            is second["status"]["containerStatuses"][0]["state"]["running"][started])
    assert first["status"]["message"] is not second["status"]["message"]
