"""What happened to a pod, in words (issue 29): evicted, preempted, node lost, OOM killed, exit
code N, or stopped by the job's own policy (not a failure). Pod dicts shaped as the API
returns them."""

from __future__ import annotations

from typing import Any

import pytest

from volcano_pipelines.volcano.refusals import ended_before_start
from volcano_pipelines.volcano.status import PodEnd, pod_end, pod_failure, restart_cause


def pod(name: str = "j-worker-0", *, task: str = "worker", exit_code: int | None = None, reason: str = "Error",
        phase: str = "Failed", deleting: bool = False, disruption: str | None = None, pod_reason: str | None = None,
        finished: str = "2026-01-01T00:00:05Z") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": [{"type": "Ready", "status": "False"}]}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "tensorflow", "state": {"terminated": {
            "exitCode": exit_code, "reason": reason, "finishedAt": finished}}}]
    if disruption:
        status["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": disruption,
                                     "message": "Eviction API: evicting", "lastTransitionTime": "2026-01-01T00:00:01Z"})
    if pod_reason:
        status["reason"] = pod_reason
        status["message"] = "The node was low on resource: memory."
    meta: dict[str, Any] = {"name": name, "annotations": {"volcano.sh/task-spec": task}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:02Z"
    return {"metadata": meta, "spec": {"nodeName": "node-1"}, "status": status}


@pytest.mark.parametrize(("disruption", "cause"), [
    ("EvictionByEvictionAPI", "evicted"), ("PreemptionByScheduler", "preempted"), ("TerminationByKubelet", "evicted"),
    ("DeletionByTaintManager", "node lost"), ("DeletionByPodGC", "node lost"),
])
def test_disruption_condition_names_the_cause(disruption: str, cause: str) -> None:
    end = pod_end(pod(exit_code=137, deleting=True, disruption=disruption), job_phase="Restarting")
    assert end is not None and end.cause == cause and end.failure
    assert end.reason == disruption and end.at == "2026-01-01T00:00:01Z" and end.node == "node-1"
    assert end.describe().startswith(f"pod j-worker-0 (task worker) {cause} (exit code 137, reason {disruption})")


def test_kubelet_eviction_without_condition_is_evicted() -> None:
    end = pod_end(pod(pod_reason="Evicted"))
    assert end is not None and end.cause == "evicted" and "low on resource" in end.describe()


def test_oom_killed_container() -> None:
    end = pod_end(pod(exit_code=137, reason="OOMKilled"))
    assert end is not None and end.cause == "OOM killed" and end.exit_code == 137 and end.container == "tensorflow"


def test_pod_killed_while_the_job_completes_is_no_failure() -> None:
    # CompleteJob deletes the parameter servers: SIGKILL after the grace period, phase Failed.
    ps = pod("j-ps-0", task="ps", exit_code=137, deleting=True)
    for phase in ("Completing", "Completed", "Terminating", "Aborting", "Restarting"):
        end = pod_end(ps, job_phase=phase)
        assert end is not None and end.cause == "stopped by the job" and not end.failure
    running = pod_end(ps, job_phase="Running")
    assert running is not None and running.cause == "deleted" and running.failure


def test_non_signal_exit_is_a_failure_even_while_the_job_stops() -> None:
    end = pod_end(pod(exit_code=1, deleting=True), job_phase="Terminating")
    assert end is not None and end.cause == "exit code 1" and end.failure
    assert end.describe() == "pod j-worker-0 (task worker) exit code 1 (reason Error)"


def test_running_or_succeeded_pods_have_no_end() -> None:
    assert pod_end(pod(phase="Running")) is None
    assert pod_end(pod(exit_code=0, reason="Completed", phase="Succeeded")) is None


def test_restart_cause_is_the_earliest_failure_not_the_stopped_rest() -> None:
    evicted = pod_end(pod("j-ps-0", task="ps", exit_code=137, deleting=True, disruption="EvictionByEvictionAPI"))
    chief = pod_end(pod("j-chief-0", task="chief", exit_code=1, finished="2026-01-01T00:00:03Z"))
    stopped = pod_end(pod("j-worker-0", exit_code=137, deleting=True), job_phase="Restarting")
    assert evicted and chief and stopped
    assert restart_cause([stopped, chief, evicted]) == evicted
    assert restart_cause([stopped]) is None


def test_failure_prefers_a_pod_that_failed_on_its_own() -> None:
    killed = pod("j-ps-0", task="ps", exit_code=137, deleting=True, finished="2026-01-01T00:00:01Z")
    failed = pod("j-worker-1", exit_code=2, finished="2026-01-01T00:00:09Z")
    failure = pod_failure([killed, failed])
    assert failure is not None and failure.pod == "j-worker-1" and failure.cause == "exit code 2"
    evicted = pod_failure([pod(pod_reason="Evicted")])
    assert evicted is not None and evicted.describe().startswith("pod j-worker-0 (task worker) evicted, reason Evicted")


def test_ended_before_start_names_the_queue_and_the_controller_event() -> None:
    job = {"status": {"state": {"phase": "Terminated"}}}
    events = [{"type": "Normal", "reason": "Created", "lastTimestamp": "2026-01-01T00:00:00Z"},
              {"type": "Warning", "reason": "FailedSync", "message": "SyncJob x retry limit reached",
               "lastTimestamp": "2026-01-01T00:02:40Z"}]
    text = ended_before_start(job, events, "queue vpipe does not exist")
    assert text == ("no pod ever ran: queue vpipe does not exist; Volcano: FailedSync: SyncJob x retry limit reached")
    assert ended_before_start(job, [], None) == "no pod ever ran: Volcano gave no reason (no event or state message)"


def test_a_named_end_is_the_cause_before_a_bare_deletion_seen_earlier() -> None:
    """Seen under load on the control plane: Volcano deleted the parameter server for the
    restart before the evicted worker's DisruptionTarget reached the pod watch, and the step
    named the parameter server's deletion as the cause."""
    deleted = pod_end(pod("j-ps-0", task="ps", deleting=True, finished="2026-01-01T00:00:01Z"), job_phase="Running")
    evicted = pod_end(pod("j-worker-0", exit_code=137, deleting=True, disruption="EvictionByEvictionAPI",
                          finished="2026-01-01T00:00:05Z"))
    assert deleted is not None and deleted.cause == "deleted" and deleted.failure
    assert evicted is not None and evicted.cause == "evicted"
    assert restart_cause([deleted, evicted]) == evicted
    assert restart_cause([deleted]) == deleted  # with nothing better, the deletion is the cause


def test_a_named_end_is_the_cause_even_when_the_deletion_is_timed_earlier() -> None:
    """The order is by kind first: a deletion seen seconds before the named end (the job's own
    restart deleting the other pods while the evicted pod's status is still on its way) is
    not the cause; between two named ends, the earlier one is."""
    deleted = PodEnd("j-ps-0", "ps", "deleted", at="2026-01-01T00:00:01Z")
    evicted = PodEnd("j-worker-0", "worker", "evicted", exit_code=137, at="2026-01-01T00:00:09Z")
    oom = PodEnd("j-worker-1", "worker", "OOM killed", exit_code=137, at="2026-01-01T00:00:05Z")
    assert restart_cause([deleted, evicted]) == evicted
    assert restart_cause([evicted, deleted]) == evicted
    assert restart_cause([deleted, evicted, oom]) == oom
    assert restart_cause([PodEnd("j-worker-0", "worker", "evicted"), oom]) == oom  # an unknown time goes last
