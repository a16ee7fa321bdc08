"""The wait policy against the in-memory backend: each behaviour the step promises, with an
injected clock (nothing sleeps)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.waiting import MANIFEST, Recorder, wait
from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, failed_pod, job
from volcano_pipelines.backends.base import Scheduling
from volcano_pipelines.errors import EXIT_CLUSTER
from volcano_pipelines.steps._waiting import Cancelled, PodDeleted, StopSignal, WaitPolicy, completing_seconds, run


def test_completed_job_succeeds_with_duration_and_counts() -> None:
    clock = FakeClock()
    running = job("Running", tasks={"ps": {"Running": 1}, "worker": {"Running": 1}})
    done = job("Completed", tasks={"worker": {"Succeeded": 1}}, changed="2026-01-01T00:01:40Z")
    backend = MemoryBackend([running, None, done], clock)
    progress = Recorder()
    result = wait(backend, clock, progress)
    assert result.succeeded and result.phase == "Completed" and result.created
    assert result.duration_seconds == 100.0
    assert result.tasks["worker"]["succeeded"] == 1
    assert result.tasks["ps"]["running"] == 0  # no pods remain: Volcano ended the parameter servers
    assert ("Running", None) in progress.jobs and progress.jobs[-1][0] == "Completed"
    assert backend.open_sessions == 0 and "abort" not in backend.calls and "delete" not in backend.calls


def test_failed_with_retries_reports_the_pod_seen_failing_even_when_the_end_list_is_empty() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Running"), job("Restarting", retries=1), job("Failed", retries=2)], clock)
    backend.failed = [failed_pod("j-worker-0", "worker", 3)]
    backend.remaining_pods = []  # Volcano deleted the failed pod before the job said Failed
    backend.logs = {"j-worker-0": "Traceback ...\nValueError: bad input\n"}
    progress = Recorder()
    result = wait(backend, clock, progress)
    assert not result.succeeded and result.phase == "Failed" and result.retries == 2
    assert result.failure is not None
    assert (result.failure["pod"], result.failure["task"], result.failure["exit_code"]) == ("j-worker-0", "worker", 3)
    assert result.failure["log_tail"].endswith("ValueError: bad input\n")
    assert "after 2 restart(s)" in result.message and "exit code 3" in result.message
    assert any("j-worker-0" in n for n in progress.notes)  # said while it happened, not only at the end


def test_pending_shows_the_scheduler_reason_and_asks_at_most_every_hint_interval() -> None:
    clock = FakeClock()
    pending = job("Pending")
    backend = MemoryBackend([pending, None, None, None, None, job("Running"), job("Completed")], clock, tick=2.0)
    backend.hint = Scheduling(problem="0/3 nodes are available: 3 Insufficient cpu")
    progress = Recorder()
    result = wait(backend, clock, progress, hint_interval_seconds=5)
    assert result.succeeded
    assert ("Pending", "0/3 nodes are available: 3 Insufficient cpu") in progress.jobs
    assert ("Running", None) in progress.jobs  # the reason goes away once it runs
    # 5 Pending observations 2 s apart (t=2..10): asked at t=2, 8 (not at 4, 6, 10).
    assert backend.calls.count("scheduling") == 2
    assert all(w <= 5 for w in backend.windows[:5])  # short watch windows while waiting


def test_admitted_but_still_pending_is_nudged_once_per_interval() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Pending")] + [None] * 14 + [job("Completed")], clock, tick=5.0)
    backend.hint = Scheduling(admitted=True)
    result = wait(backend, clock, hint_interval_seconds=5, stuck_admitted_seconds=30)
    assert result.succeeded
    # Admitted at t=5; stuck from t=35; again from t=65: two nudges in 75 s, never two in a row.
    assert backend.calls.count("nudge") == 2


def test_timeout_aborts_the_job_and_fails_the_step() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Running")] + [None] * 20, clock, tick=5.0,
                            after_abort=[job("Aborting"), job("Aborted")])
    result = wait(backend, clock, timeout_seconds=30)
    assert backend.calls.count("abort") == 1 and backend.abort_reason == "StepTimeout"
    assert "delete" not in backend.calls
    assert not result.succeeded and result.phase == "Aborted"
    assert result.message.startswith("timed out after 30s while the job was Running") and result.message.endswith("job aborted")
    assert max(backend.windows) <= 31  # never watches past the deadline


def test_timeout_then_the_job_completes_during_the_abort_still_fails_the_step() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Running")] + [None] * 10, clock, after_abort=[job("Completed")])
    result = wait(backend, clock, timeout_seconds=10)
    assert result.phase == "Completed"
    assert result.succeeded is False


def test_timeout_where_commands_are_not_available_deletes_and_says_so() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Pending")] + [None] * 10, clock, abort_result="deleted")
    backend.hint = Scheduling(problem="queue q is closed")
    result = wait(backend, clock, timeout_seconds=10)
    assert not result.succeeded and "while the job was Pending (queue q is closed); job deleted" in result.message


@pytest.mark.parametrize("on_cancel,expected", [("delete", ["delete"]), ("abort", ["abort"]), ("keep", [])])
def test_cancel_applies_on_cancel(on_cancel: str, expected: list[str]) -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Running"), StopSignal("cancelled by SIGTERM")], clock)
    with pytest.raises(Cancelled) as info:
        wait(backend, clock, on_cancel=on_cancel)
    assert [c for c in backend.calls if c in ("delete", "abort")] == expected
    done = {"delete": "deleted", "abort": "aborted", "keep": "kept"}[on_cancel]
    assert str(info.value) == f"cancelled by SIGTERM; job ns/j {done}"
    assert backend.open_sessions == 0


class RecordingBackend(MemoryBackend):
    """A backend whose sessions write a post-mortem record: what the step asked it to say."""

    def post_mortem(self, restarts: list[dict[str, Any]], **said: Any) -> dict[str, Any]:
        self.calls.append("post_mortem")
        self.saved = {"restarts": restarts, **said}
        return self.saved


@pytest.mark.parametrize("on_cancel", ["delete", "abort"])
def test_a_cancel_is_in_the_post_mortem_it_saves_before_stopping_the_job(on_cancel: str) -> None:
    """Issue 42 item 9: the record saved on a cancel said `phase | Running` and nothing of the
    cancel; it says the cancel, and is saved before the job (and its pods) go."""
    clock = FakeClock()
    backend = RecordingBackend([job("Running"), StopSignal("cancelled by SIGINT")], clock)
    with pytest.raises(Cancelled):
        wait(backend, clock, on_cancel=on_cancel)
    assert [c for c in backend.calls if c in ("post_mortem", on_cancel)] == ["post_mortem", on_cancel]
    assert backend.saved["cancelled"] == f"cancelled by SIGINT: stopping the job (on_cancel={on_cancel})"


@pytest.mark.parametrize("pod_deleted", [True, False])
def test_sigterm_while_the_steps_own_pod_is_deleted_applies_on_pod_deleted(pod_deleted: bool) -> None:
    """A lost step pod (deleted, evicted) gets SIGTERM like a cancelled run: with
    on_pod_deleted=keep the job goes on for the retried step to attach to, and the step exits 3
    (the platform's problem, which Argo's retry expression retries). A real cancel still deletes."""
    clock = FakeClock()
    backend = MemoryBackend([job("Running"), StopSignal("cancelled by SIGTERM")], clock)
    backend.own_pod_deleted = lambda: pod_deleted  # type: ignore[attr-defined]
    with pytest.raises(Cancelled if not pod_deleted else PodDeleted) as info:
        wait(backend, clock, on_cancel="delete", on_pod_deleted="keep")
    deleted = [c for c in backend.calls if c in ("delete", "abort")]
    if pod_deleted:
        assert deleted == [] and info.value.exit_code == EXIT_CLUSTER
        assert "pod was being deleted; job ns/j kept (on_pod_deleted=keep)" in str(info.value)
    else:
        assert deleted == ["delete"] and str(info.value) == "cancelled by SIGTERM; job ns/j deleted"


def test_on_pod_deleted_unset_never_asks_about_the_pod() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Running"), StopSignal("cancelled by SIGTERM")], clock)
    asked: list[bool] = []
    backend.own_pod_deleted = lambda: asked.append(True) or True  # type: ignore[attr-defined]
    with pytest.raises(Cancelled):
        wait(backend, clock, on_cancel="delete")
    assert asked == [] and "delete" in backend.calls


def test_job_deleted_before_it_finished() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Running")], clock)
    result = wait(backend, clock)
    assert result.phase == "Deleted" and not result.succeeded and "deleted before it finished" in result.message


def test_attach_to_a_finished_job_reports_it_without_waiting() -> None:
    clock = FakeClock()
    backend = MemoryBackend([], clock, existing=job("Completed"))
    result = wait(backend, clock)
    assert result.succeeded and not result.created and backend.windows == []


def test_no_wait_returns_after_submit() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Completed")], clock)
    result = wait(backend, clock, wait=False)
    assert result.phase == "Pending" and result.created and backend.windows == []


def test_missing_information_and_linger_reach_the_result() -> None:
    clock = FakeClock()
    backend = MemoryBackend([job("Completed")], clock)
    backend.notes = ["failed pods deleted before the job ended (permission to watch pods denied)"]
    backend.linger = 12.5
    result = wait(backend, clock)
    assert result.missing == backend.notes and result.ps_linger_seconds == 12.5
    assert result.to_dict()["missing"] == backend.notes


def test_the_ps_linger_of_a_completed_job_is_how_long_volcano_had_it_completing() -> None:
    def conditions(*pairs: tuple[str, str]) -> dict:
        return {"status": {"conditions": [{"status": phase, "lastTransitionTime": at} for phase, at in pairs]}}

    done = conditions(("Running", "2026-01-01T00:00:00Z"), ("Completing", "2026-01-01T00:01:00Z"),
                      ("Completed", "2026-01-01T00:01:03Z"))
    assert completing_seconds(done) == 3.0
    assert completing_seconds(conditions(("Running", "2026-01-01T00:00:00Z"), ("Completed", "2026-01-01T00:01:03Z"))) is None
    assert completing_seconds({"status": {}}) is None and completing_seconds({}) is None


def test_a_sigterm_before_the_wait_is_a_cancel_not_a_bare_signal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler's StopSignal is not an Exception; one that comes while the job is being
    submitted (before the wait's cleanup can answer it) still leaves run() as Cancelled, which
    the front ends report with their exit code, never as a traceback."""
    import os
    import signal

    clock = FakeClock()
    backend = MemoryBackend([job("Running")], clock)
    submit = backend.submit

    def signalled(manifest: dict[str, object]) -> object:
        os.kill(os.getpid(), signal.SIGTERM)
        return submit(manifest)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "submit", signalled)
    with pytest.raises(Cancelled) as info:
        run(backend, MANIFEST, WaitPolicy(), clock=clock)
    assert str(info.value) == "cancelled by SIGTERM"


def _pod(task: str, index: int, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": f"j-{task}-{index}", "annotations": {"volcano.sh/task-spec": task}},
            "status": {"phase": phase}}


def test_status_of_a_completed_job_counts_the_pods_volcano_kept_and_the_ones_it_stopped() -> None:
    """vpipe status after the end: Volcano cleared the counts (the chief's alone kept), deleted
    the running parameter servers and kept the finished pods. Every replica is counted (it
    printed 'no pods left' for each role of a 1,101-pod job whose 1,001 pods were still there)."""
    from volcano_pipelines.steps._waiting import job_result

    clock = FakeClock()
    backend = MemoryBackend([], clock)
    backend.current = job("Completed", tasks={"chief": {"Succeeded": 1}})
    backend.current["spec"]["tasks"] = [{"name": "chief", "replicas": 1}, {"name": "ps", "replicas": 2},
                                        {"name": "worker", "replicas": 2}, {"name": "worker-s1", "replicas": 2}]
    backend.remaining_pods = [_pod("chief", 0, "Succeeded"), _pod("worker", 0, "Succeeded"),
                              _pod("worker", 1, "Succeeded"), _pod("worker-s1", 0, "Succeeded"),
                              _pod("worker-s1", 1, "Failed")]
    result = job_result(backend, "ns", "j")
    assert result.tasks["chief"] == {"pending": 0, "running": 0, "succeeded": 1, "failed": 0, "stopped": 0}
    assert result.tasks["ps"] == {"pending": 0, "running": 0, "succeeded": 0, "failed": 0, "stopped": 2}
    assert result.tasks["worker"] == {"pending": 0, "running": 0, "succeeded": 3, "failed": 1, "stopped": 0}


def test_status_of_a_failed_job_counts_only_the_pods_that_remain() -> None:
    """A failed job may never have made some of its pods: nothing is said of what is gone."""
    from volcano_pipelines.steps._waiting import job_result

    clock = FakeClock()
    backend = MemoryBackend([], clock)
    backend.current = job("Failed")
    backend.current["spec"]["tasks"] = [{"name": "ps", "replicas": 2}, {"name": "worker", "replicas": 4}]
    backend.remaining_pods = [_pod("worker", 0, "Failed"), _pod("worker", 1, "Succeeded")]
    result = job_result(backend, "ns", "j", log_lines=0)
    assert result.tasks["worker"] == {"pending": 0, "running": 0, "succeeded": 1, "failed": 1, "stopped": 0}
    assert result.tasks["ps"] == {"pending": 0, "running": 0, "succeeded": 0, "failed": 0, "stopped": 0}
