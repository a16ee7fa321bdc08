"""Riding through restarts (issue 29) against the in-memory backend: each restart reported with
its cause as it happens, pods stopped by the job's own policy are no failures, a job out of
restarts says so, a job Volcano ended before any pod ran says why."""

from __future__ import annotations

from typing import Any

from tests.helpers.waiting import Recorder, wait
from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, failed_pod, job
from volcano_pipelines.backends.base import Pod


def evicted(name: str, task: str, at: str = "2026-01-01T00:00:30Z") -> Pod:
    pod = failed_pod(name, task, 137, finished="2026-01-01T00:00:40Z")
    pod["metadata"]["deletionTimestamp"] = at
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                                    "message": "Eviction API: evicting", "lastTransitionTime": at}]
    return pod


def stopped(name: str, task: str) -> Pod:
    """A pod the job's own controller deleted: SIGKILL after the grace period, exit 137."""
    pod = failed_pod(name, task, 137, finished="2026-01-01T00:01:39Z")
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:30Z"
    return pod


def fail_with(*pods: Pod) -> Any:
    def step(backend: MemoryBackend) -> None:
        backend.failed.extend(pods)
    return step


def with_max_retry(j: dict[str, Any], n: int) -> dict[str, Any]:
    j["spec"]["maxRetry"] = n
    return j


def test_restart_is_reported_with_its_cause_and_the_job_rides_through() -> None:
    clock = FakeClock()
    script = [job("Running", tasks={"ps": {"Running": 1}}), fail_with(evicted("j-ps-0", "ps")),
              job("Restarting", retries=1), fail_with(stopped("j-worker-0", "worker")),
              job("Running", retries=1, tasks={"ps": {"Running": 1}}), job("Completed", retries=1)]
    backend = MemoryBackend(script, clock)
    progress = Recorder()
    result = wait(backend, clock, progress)
    assert result.succeeded and result.retries == 1 and result.failure is None
    [restart] = result.restarts
    assert (restart["number"], restart["pod"], restart["task"], restart["cause"]) == (1, "j-ps-0", "ps", "evicted")
    assert restart["reason"] == "EvictionByEvictionAPI" and restart["at"] == "2026-01-01T00:00:30Z"
    assert result.to_dict()["restart_causes"] == "1: evicted pod j-ps-0"
    assert any(n.startswith("job j: restart 1: pod j-ps-0 (task ps) evicted") for n in progress.notes)
    # The worker the restart stopped is neither a cause nor a failure line.
    assert not any("j-worker-0" in n for n in progress.notes)


def test_pods_stopped_by_complete_job_are_no_failures() -> None:
    clock = FakeClock()
    script = [job("Running"), job("Completing", tasks={"worker": {"Succeeded": 2}}),
              fail_with(stopped("j-ps-0", "ps"), stopped("j-ps-1", "ps")), job("Completed")]
    backend = MemoryBackend(script, clock)
    progress = Recorder()
    result = wait(backend, clock, progress)
    assert result.succeeded and result.failure is None and result.message is None and result.restarts == []
    assert not any("exit code" in n or "j-ps" in n for n in progress.notes)


def test_a_job_out_of_restarts_says_so_with_the_last_cause() -> None:
    # Volcano counts the failure that ends the job as well: with maxRetry 3 the job runs three
    # times (two restarts); the third failure takes retryCount to 3 and the job to Failed.
    clock = FakeClock()
    script: list[Any] = [with_max_retry(job("Running"), 3)]
    for n in range(1, 4):
        script += [fail_with(evicted(f"j-worker-0-{n}", "worker", f"2026-01-01T00:0{n}:00Z")),
                   with_max_retry(job("Restarting", retries=n), 3),
                   with_max_retry(job("Running", retries=n), 3) if n < 3 else None]
    script += [with_max_retry(job("Failed", retries=3), 3)]
    backend = MemoryBackend([s for s in script if s is not None], clock)
    progress = Recorder()
    result = wait(backend, clock, progress)
    assert not result.succeeded and [r["cause"] for r in result.restarts] == ["evicted"] * 2
    assert [r["pod"] for r in result.restarts] == ["j-worker-0-1", "j-worker-0-2"]
    # One count everywhere: the result, its outputs, the message, the notes as they happened.
    assert result.retries == 2 and result.to_dict()["retries"] == 2
    assert not any("restart 3" in n for n in progress.notes), progress.notes
    assert result.failure is not None and result.failure["pod"] == "j-worker-0-3"  # the last run's failure
    assert result.message == ("job ns/j Failed: restarted 2 time(s), max_retry 3 reached: last cause pod j-worker-0-3 "
                              "(task worker) evicted (exit code 137, reason EvictionByEvictionAPI): "
                              "Eviction API: evicting")


def test_max_retry_1_fails_at_the_first_failure_with_no_restart() -> None:
    clock = FakeClock()
    script = [with_max_retry(job("Running"), 1), fail_with(failed_pod("j-worker-0", "worker", 3)),
              with_max_retry(job("Restarting", retries=1), 1), with_max_retry(job("Failed", retries=1), 1)]
    progress = Recorder()
    result = wait(MemoryBackend(script, clock), clock, progress)
    assert (result.retries, result.restarts) == (0, [])
    assert not any("restart 1" in n for n in progress.notes), progress.notes
    assert result.message is not None and result.message.startswith(
        "job ns/j Failed: restarted 0 time(s), max_retry 1 reached: last cause pod j-worker-0 (task worker) exit code 3")


def test_a_restart_whose_cause_was_not_seen_says_so() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Running"), job("Restarting", retries=1), job("Completed", retries=1)], clock)
    result = wait(backend, clock)
    assert result.restarts[0]["cause"] == "unknown" and "cause not seen" in result.restarts[0]["text"]


class NoPodsBackend(MemoryBackend):
    def why_no_pods(self) -> str:
        return "no pod ever ran: queue vpipe does not exist"


def test_a_job_ended_before_any_pod_ran_says_why() -> None:
    clock = FakeClock()
    backend = NoPodsBackend([job("Pending"), job("Terminated")], clock)
    result = wait(backend, clock)
    assert result.message == "job ns/j Terminated: no pod ever ran: queue vpipe does not exist"


def test_a_restart_waits_a_moment_for_a_named_cause_before_naming_a_deletion() -> None:
    """The restart is seen with only a bare deletion known (read while the job still ran: often
    the job's own doing); the evicted pod's end arrives next and is the cause. With no better
    cause within the grace, the deletion is named."""
    from volcano_pipelines.steps._restarts import RestartTracker

    deleted = failed_pod("j-ps-0", "ps", 137, finished="2026-01-01T00:00:31Z")
    deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
    clock = FakeClock()
    progress = Recorder()
    tracker = RestartTracker("ns", "j", progress, clock)
    tracker.observe(job("Running"), [deleted])  # read before the job's phase changed: a failure
    tracker.observe(job("Restarting", retries=1), [])
    assert tracker.restarts == []  # waiting for a named cause
    clock.advance(2)
    tracker.observe(job("Restarting", retries=1), [evicted("j-worker-0", "worker")])
    [restart] = tracker.restarts
    assert (restart["pod"], restart["cause"]) == ("j-worker-0", "evicted")

    alone = RestartTracker("ns", "j", progress, clock)
    alone.observe(job("Running"), [deleted])
    alone.observe(job("Restarting", retries=1), [])
    assert alone.restarts == []
    clock.advance(RestartTracker.NAMED_CAUSE_GRACE_SECONDS)
    alone.observe(job("Running", retries=1), [])
    [restart] = alone.restarts
    assert (restart["pod"], restart["cause"]) == ("j-ps-0", "deleted")
