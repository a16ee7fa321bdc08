"""The step says so when Volcano does not complete a job it should have completed (issue 41:
at 2,000 pods etcd overflowed, the controller failed every deletion, and the step kept saying
"Running" for minutes): the problem is shown beside the phase after the grace, with the
controller's newest warning, and a timeout's message carries it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, job
from volcano_pipelines.progress import Progress
from volcano_pipelines.steps._waiting import WaitPolicy, run
from volcano_pipelines.volcano.spec import JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.status import JobStatus
from volcano_pipelines.volcano.tf import build_tf_job

MANIFEST = build_tf_job(TFJobSpec(job=JobOptions(name="j", namespace="ns", run_id="r1"), ps=Role(replicas=2),
                                  worker=Role(replicas=2), chief=Role()))
WARNING = "FailedDeletePod: etcdserver: mvcc: database space exceeded"


class Problems(Progress):
    def __init__(self) -> None:
        self.shown: list[tuple[str, str | None]] = []

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        self.shown.append((status.phase, problem))


def chief_done(phase: str = "Running") -> dict[str, Any]:
    state = job(phase, tasks={"chief": {"Succeeded": 1}, "ps": {"Running": 2}, "worker": {"Succeeded": 2}})
    state["spec"] = MANIFEST["spec"]
    return state


def wait(script: list[Any], **policy: Any) -> tuple[Any, MemoryBackend, Problems]:
    clock = FakeClock()
    backend = MemoryBackend(script, clock, tick=5.0)
    backend.warning = WARNING
    progress = Problems()
    result = run(backend, MANIFEST, WaitPolicy(**policy), progress, clock=clock, handle_signals=False)
    return result, backend, progress


def test_a_job_left_running_after_its_chief_succeeded_is_named_with_the_controllers_warning() -> None:
    script: list[Any] = [chief_done()] + [None] * 18 + [chief_done("Completed")]  # 95 s Running, then Completed
    result, backend, progress = wait(script, controller_grace_seconds=60)
    assert result.succeeded
    problems = [p for phase, p in progress.shown if phase == "Running" and p]
    assert problems and problems[0].startswith("Volcano has not completed the job 60s after chief: 1/1 succeeded")
    assert problems[-1].endswith(f"its newest warning about the job: {WARNING}")
    # Nothing before the grace; the events read at most every 30 s.
    assert len(problems) == len([p for p in progress.shown if p[0] == "Running"]) - 12
    assert backend.calls.count("controller_warning") == 2  # at 60 and 90 s


def test_a_job_the_controller_completes_in_time_shows_no_problem_and_reads_no_events() -> None:
    script: list[Any] = [chief_done()] + [None] * 6 + [chief_done("Completing"), chief_done("Completed")]
    result, backend, progress = wait(script, controller_grace_seconds=60)
    assert result.succeeded and not any(p for _, p in progress.shown)
    assert "controller_warning" not in backend.calls


def test_a_timeout_while_the_controller_is_stuck_says_why() -> None:
    result, _, _ = wait([chief_done()] + [None] * 40, controller_grace_seconds=60, timeout_seconds=120)
    assert not result.succeeded and result.message is not None
    assert result.message.startswith("timed out after 120s while the job was Running (Volcano has not completed the job")
    assert WARNING in result.message


def _chief_pod(finished_seconds_ago: float) -> dict[str, Any]:
    import time
    from datetime import datetime, timezone

    finished = datetime.fromtimestamp(time.time() - finished_seconds_ago, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": {"name": "j-chief-0", "annotations": {"volcano.sh/task-spec": "chief"}},
            "status": {"phase": "Succeeded", "containerStatuses": [
                {"name": "tensorflow", "state": {"terminated": {"exitCode": 0, "finishedAt": finished}}}]}}


@pytest.mark.parametrize(("ago", "said"), [(300, True), (10, False)])
def test_status_says_it_in_one_look_from_when_the_completing_pods_ended(ago: float, said: bool) -> None:
    """vpipe status has no watch: how long the condition has held comes from the succeeded
    pods' end, and the controller's warning is read only when it is said."""
    from volcano_pipelines.steps._waiting import job_result

    backend = MemoryBackend([], FakeClock())
    backend.warning = WARNING
    backend.current = chief_done()
    backend.remaining_pods = [_chief_pod(ago)]
    result = job_result(backend, "ns", "j")
    if said:
        assert result.message is not None and result.message.startswith("Volcano has not completed the job 30")
        assert "after chief: 1/1 succeeded" in result.message and result.message.endswith(WARNING)
        assert backend.calls.count("controller_warning") == 1
    else:
        assert result.message is None and "controller_warning" not in backend.calls


def test_a_gang_still_pending_after_its_chief_succeeded_is_named_too() -> None:
    """At 11,001 pods the chief succeeded while Volcano still had the job Pending (its
    TaskCompleted request queued behind thousands of pod events): said, not the gang's hint."""
    script: list[Any] = [chief_done("Pending")] + [None] * 14 + [chief_done("Completed")]
    result, backend, progress = wait(script, controller_grace_seconds=60)
    assert result.succeeded
    problems = [p for phase, p in progress.shown if phase == "Pending" and p and p.startswith("Volcano has not")]
    assert problems and "after chief: 1/1 succeeded" in problems[0] and problems[-1].endswith(WARNING)
