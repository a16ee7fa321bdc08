"""Reading job status, scheduling problems and failures from API objects."""

from __future__ import annotations

from volcano_pipelines.volcano.status import (
    JobStatus,
    TaskCounts,
    format_progress,
    job_status,
    counts_from_pods,
    final_counts,
    latest_counts,
    pod_failure,
    podgroup_name,
    scheduling_problem,
    scheduling_problem_from_events,
)


def test_job_status_counts_per_task() -> None:
    job = {
        "spec": {"tasks": [{"name": "ps"}, {"name": "worker"}]},
        "status": {
            "state": {"phase": "Running"},
            "retryCount": 2,
            "taskStatusCount": {"worker": {"phase": {"Running": 1, "Succeeded": 2, "Failed": 1, "Pending": 1, "Unknown": 1}}},
        },
    }
    status = job_status(job)
    assert status.phase == "Running" and status.retries == 2
    assert status.tasks["worker"] == TaskCounts(pending=2, running=1, succeeded=2, failed=1)
    assert status.tasks["ps"] == TaskCounts()  # declared but no pods yet
    assert not status.finished


def test_job_without_status_is_pending() -> None:
    status = job_status({"spec": {"tasks": []}})
    assert status.phase == "Pending" and status.retries == 0 and not status.finished


def test_final_phases() -> None:
    assert job_status({"status": {"state": {"phase": "Completed"}}}).succeeded
    for phase in ("Failed", "Aborted", "Terminated"):
        s = job_status({"status": {"state": {"phase": phase, "message": "m", "reason": "r"}}})
        assert s.finished and not s.succeeded and s.message == "m" and s.reason == "r"
    for phase in ("Running", "Restarting", "Completing", "Aborting", "Terminating"):
        assert not job_status({"status": {"state": {"phase": phase}}}).finished


def test_podgroup_name() -> None:
    assert podgroup_name({"metadata": {"name": "mnist", "uid": "1234-ab"}}) == "mnist-1234-ab"


def test_scheduling_problem_from_podgroup_condition() -> None:
    pg = {"status": {"conditions": [
        {"type": "Scheduled", "status": "True"},
        {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
         "message": "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending"},
    ]}}
    assert scheduling_problem(pg) == "NotEnoughResources: 3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending"
    assert scheduling_problem({"status": {"conditions": [{"type": "Unschedulable", "status": "False"}]}}) is None
    assert scheduling_problem(None) is None


def test_scheduling_problem_from_events_takes_newest_warning() -> None:
    events = [
        {"type": "Warning", "reason": "Unschedulable", "message": "old", "lastTimestamp": "2026-01-01T00:00:00Z"},
        {"type": "Warning", "reason": "Unschedulable", "message": "new", "lastTimestamp": "2026-01-01T00:01:00Z"},
        {"type": "Normal", "reason": "Scheduled", "message": "x", "lastTimestamp": "2026-01-01T00:02:00Z"},
    ]
    assert scheduling_problem_from_events(events) == "Unschedulable: new"
    assert scheduling_problem_from_events([]) is None


def pod(name: str, *, exit_code: int | None = None, phase: str = "Running", finished: str = "", last: bool = False) -> dict:
    statuses = []
    if exit_code is not None:
        term = {"exitCode": exit_code, "reason": "Error", "finishedAt": finished, "message": "boom"}
        statuses = [{"state": {"running": {}}, "lastState": {"terminated": term}} if last else {"state": {"terminated": term}}]
    return {"metadata": {"name": name, "annotations": {"volcano.sh/task-spec": "worker"}},
            "status": {"phase": phase, "containerStatuses": statuses}}


def test_pod_failure_first_non_zero_exit() -> None:
    pods = [
        pod("j-worker-0", exit_code=0, phase="Succeeded", finished="2026-01-01T00:00:01Z"),
        pod("j-worker-1", exit_code=3, phase="Failed", finished="2026-01-01T00:00:05Z"),
        pod("j-worker-2", exit_code=137, phase="Failed", finished="2026-01-01T00:00:02Z", last=True),
        pod("j-ps-0"),
    ]
    failure = pod_failure(pods)
    assert failure is not None
    assert (failure.pod, failure.exit_code, failure.reason, failure.task) == ("j-worker-2", 137, "Error", "worker")
    assert failure.describe() == "pod j-worker-2 (task worker), exit code 137, reason Error: boom"


def test_pod_failure_phase_only_and_none() -> None:
    evicted = {"metadata": {"name": "p"}, "status": {"phase": "Failed", "reason": "Evicted", "message": "low memory"}}
    failure = pod_failure([evicted])
    assert failure is not None and failure.exit_code is None and failure.reason == "Evicted"
    assert pod_failure([pod("ok", exit_code=0, phase="Succeeded")]) is None


def test_format_progress() -> None:
    status = JobStatus(phase="Pending", retries=1, tasks={"ps": TaskCounts(pending=1), "worker": TaskCounts(running=2)})
    line = format_progress("mnist", status, "NotEnoughResources: no GPUs")
    assert line.startswith("job mnist: Pending (retries 1) | ps: 0 running")
    assert "worker: 2 running" in line and line.endswith("waiting: NotEnoughResources: no GPUs")


def test_latest_counts_keep_what_was_seen_when_volcano_clears_them() -> None:
    seen = {"worker": TaskCounts(succeeded=2), "ps": TaskCounts(running=1)}
    final = {"worker": TaskCounts(), "ps": TaskCounts(), "chief": TaskCounts()}
    merged = latest_counts(seen, final)
    assert merged == {"worker": TaskCounts(succeeded=2), "ps": TaskCounts(running=1), "chief": TaskCounts()}
    assert latest_counts(seen, {"worker": TaskCounts(failed=1, running=1)})["worker"] == TaskCounts(failed=1, running=1)


def test_latest_counts_of_fewer_pods_count_the_pods_gone_as_stopped() -> None:
    # A completing job: Volcano has deleted 73 of its 100 running parameter servers when its
    # status is written; the 73 were stopped by the job's end, not lost.
    seen = {"ps": TaskCounts(running=100), "worker": TaskCounts(succeeded=1000)}
    merged = latest_counts(seen, {"ps": TaskCounts(running=27), "worker": TaskCounts(succeeded=1000)})
    assert merged == {"ps": TaskCounts(running=27, stopped=73), "worker": TaskCounts(succeeded=1000)}
    assert final_counts(merged, {})["ps"] == TaskCounts(stopped=100)


def test_counts_from_pods_and_final_counts() -> None:
    pods = [
        {"metadata": {"labels": {"volcano.sh/task-spec": "worker"}}, "status": {"phase": "Succeeded"}},
        {"metadata": {"annotations": {"volcano.sh/task-spec": "worker"}}, "status": {"phase": "Succeeded"}},
        {"metadata": {"labels": {"volcano.sh/task-spec": "ps"}}, "status": {"phase": "Running"}},
        {"metadata": {"labels": {}}, "status": {"phase": "Running"}},  # not a task pod
    ]
    remaining = counts_from_pods(pods)
    assert remaining == {"worker": TaskCounts(succeeded=2), "ps": TaskCounts(running=1)}
    seen = {"worker": TaskCounts(running=1, succeeded=1, failed=1), "ps": TaskCounts(running=1), "chief": TaskCounts(succeeded=1)}
    final = final_counts(seen, {"worker": TaskCounts(succeeded=2)})
    # The parameter server Volcano deleted when the job ended is counted as stopped, not lost.
    assert final == {"worker": TaskCounts(succeeded=2, failed=1), "ps": TaskCounts(stopped=1),
                     "chief": TaskCounts(succeeded=1)}
