"""Hung tasks while the step waits (steps/_follow.py, steps/_waiting.py): named from the
coordinator's `vpipe:stalled` lines and from the reporting task's own reports stopping;
--on-stall warn / fail / restart; never before the first report. The in-memory backend and
an injected clock: nothing sleeps."""

from __future__ import annotations

import json

import pytest

from tests.helpers.following import running, say
from tests.helpers.progress import RecordingProgress
from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, job
from volcano_pipelines.errors import InputError
from volcano_pipelines.steps import train_tf
from volcano_pipelines.steps._follow import FollowPolicy
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.steps._waiting import WaitPolicy, run
from volcano_pipelines.volcano.stalls import STALLED_ANNOTATION
from volcano_pipelines.volcano.spec import JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

MANIFEST = build_tf_job(TFJobSpec(job=JobOptions(name="j", namespace="ns", run_id="r1"), chief=Role()))
CHIEF = "j-chief-0"
STALLED = ("vpipe:stalled count=2 tasks=chief[0],worker[1] silent=worker[1] oldest=21 oldest_task=worker[1] "
           "time=4000000000")


class Stallable(MemoryBackend):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.annotations: dict[str, str] = {}
        self.restarts: list[str] = []
        self.records: list[dict[str, object] | None] = []

    def annotate(self, annotations: dict[str, str]) -> None:
        self.annotations.update(annotations)

    def restart(self, reason: str) -> None:
        self.calls.append("restart")
        self.restarts.append(reason)

    def post_mortem(self, restarts: list[dict[str, object]], stalled: dict[str, object] | None = None) -> dict[str, object]:
        self.records.append(stalled)
        return {"json": "/tmp/x.json"}


def wait(backend: MemoryBackend, clock: FakeClock, progress: RecordingProgress, on_stall: str = "warn",
         stall: float = 20.0) -> TrainResult:
    policy = WaitPolicy(follow=FollowPolicy(interval_seconds=5, annotate_interval_seconds=5, stall_timeout_seconds=stall),
                        on_stall=on_stall)
    return run(backend, MANIFEST, policy, progress, clock=clock, handle_signals=False)


def test_warn_names_the_tasks_the_coordinator_names_and_waits_on() -> None:
    clock = FakeClock()
    script: list[object] = [running(), say("vpipe:progress step=100 total=1000"), None, say(STALLED), None, None,
                            say("vpipe:stalled count=0 tasks=none time=4000000001", "vpipe:progress step=200 total=1000"),
                            None, None, job("Completed", tasks={"chief": {"Succeeded": 1}})]
    backend = Stallable(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress)
    assert result.succeeded and "abort" not in backend.calls and "restart" not in backend.calls
    assert "job j: stalled: worker[1] (no heartbeat), chief[0] (no progress) for 21s" in progress.notes[0]
    assert "job j: no task stalled any more" in progress.notes
    assert result.stalled is not None and result.stalled["tasks"] == "chief[0],worker[1]"
    assert result.stalled["action"] == "warn" and "cleared" in result.stalled
    assert json.loads(backend.annotations[STALLED_ANNOTATION])["silent"] == "worker[1]"
    assert backend.records[-1] is not None  # the final post-mortem names them too


def test_the_live_summary_shows_the_stalled_tasks_while_they_are_stalled_and_said_once() -> None:
    clock = FakeClock()
    script: list[object] = [running(), say("vpipe:progress step=100 total=1000"), None, say(STALLED), None, None,
                            say("vpipe:stalled count=0 tasks=none time=4000000001", "vpipe:progress step=200 total=1000"),
                            None, None, job("Completed", tasks={"chief": {"Succeeded": 1}})]
    progress = RecordingProgress()
    wait(Stallable(script, clock), clock, progress)
    shown = [summary.stalled for summary in progress.summaries]
    stalled = [s for s in shown if s]
    assert stalled and stalled[0][0][0] == "chief[0],worker[1]" and stalled[0][0][1] >= 21
    assert not shown[-1]  # cleared: no longer shown
    assert sum("stalled: worker[1]" in note for note in progress.notes) == 1


def test_the_reporting_task_is_named_when_its_own_reports_stop_and_never_before_the_first() -> None:
    clock = FakeClock()
    # 30 s of start-up without any report: not a stall. Then one report, then silence (a
    # coordinator stopped as a whole prints nothing, its scan included).
    script: list[object] = [running(), *[None] * 6, say("vpipe:progress step=100 total=1000"), *[None] * 8,
                            job("Completed", tasks={"chief": {"Succeeded": 1}})]
    backend = Stallable(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress)
    stalls = [n for n in progress.notes if "stalled:" in n]
    assert stalls == ["job j: stalled: chief[0] (no progress) for 25s"], progress.notes
    assert result.stalled is not None and result.stalled["tasks"] == "chief[0]" and result.stalled["silent"] == ""


def test_a_stall_still_open_when_the_job_completes_is_over_in_the_result() -> None:
    # The wait's last turn can come before the read that would see the stopped task run again
    # (a loaded machine): the job completed, so its tasks are not hung any more.
    clock = FakeClock()
    script: list[object] = [running(), say("vpipe:progress step=100 total=1000"), *[None] * 8,
                            job("Completed", tasks={"chief": {"Succeeded": 1}})]
    backend = Stallable(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress)
    assert any("job j: stalled: chief[0] (no progress)" in note for note in progress.notes), progress.notes
    assert progress.notes[-1] == "job j: no task stalled any more (the job completed)", progress.notes
    assert result.stalled is not None and result.stalled["tasks"] == "chief[0]" and "cleared" in result.stalled
    assert "cleared" in json.loads(backend.annotations[STALLED_ANNOTATION])


def test_the_reporting_task_past_its_last_step_is_finishing_not_stalled() -> None:
    """After the last step the chief exports and evaluates, which makes no steps (seen: over
    20 s on a loaded machine)."""
    clock = FakeClock()
    script: list[object] = [running(), say("vpipe:progress step=900 total=1000"), None,
                            say("vpipe:progress step=1000 total=1000"), *[None] * 10, job("Completed")]
    backend = Stallable(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress)
    assert result.stalled is None, progress.notes


def test_no_stall_detection_with_a_timeout_of_zero() -> None:
    clock = FakeClock()
    script: list[object] = [running(), say("vpipe:progress step=100"), say(STALLED), *[None] * 10, job("Completed")]
    backend = Stallable(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress, stall=0)
    assert result.stalled is None and not any("stalled" in n for n in progress.notes)


def test_fail_aborts_the_job_after_the_record_and_the_step_fails_naming_them() -> None:
    clock = FakeClock()
    script: list[object] = [running(), say("vpipe:progress step=100"), None, say(STALLED), *[None] * 4,
                            job("Completed")]
    backend = Stallable(script, clock, after_abort=[job("Aborted")])
    result = wait(backend, clock, RecordingProgress(), on_stall="fail")
    assert not result.succeeded and backend.calls.count("abort") == 1 and backend.abort_reason == "TasksStalled"
    assert result.message == ("stalled: worker[1] (no heartbeat), chief[0] (no progress) for 21s while the job was "
                              "Running; job aborted (on_stall=fail)")
    assert result.stalled is not None and result.stalled["action"] == "fail" and "cleared" not in result.stalled
    assert backend.records and backend.records[0] is not None and backend.records[0]["tasks"] == "chief[0],worker[1]"


def test_restart_asks_for_a_restart_once_counted_with_the_stall_as_its_cause() -> None:
    clock = FakeClock()

    def new_pod(backend: MemoryBackend) -> None:
        backend.logs[CHIEF] = ""

    script: list[object] = [running(), say("vpipe:progress step=100", STALLED), None, None,
                            job("Restarting", retries=1), new_pod, running(retries=1),
                            say("vpipe:resumed step=100", "vpipe:progress step=300"), None, None, None,
                            job("Completed", retries=1)]
    backend = Stallable(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress, on_stall="restart")
    assert backend.restarts == ["TasksStalled"] and result.succeeded
    assert [r["cause"] for r in result.restarts] == ["stalled"]
    assert result.restarts[0]["text"].startswith("restart 1: stalled: worker[1] (no heartbeat)")
    assert result.resumed_from_step == 100
    assert result.stalled is not None and result.stalled["action"] == "restart" and "cleared" in result.stalled


def test_the_parameters_are_checked_and_reach_every_task_as_its_environment() -> None:
    with pytest.raises(InputError, match="on_stall"):
        train_tf("j", on_stall="panic", dry_run=True)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="stall_timeout"):
        train_tf("j", stall_timeout=-1, dry_run=True)
    result = train_tf("j", stall_timeout=45, dry_run=True, namespace="ns")
    assert result.manifest is not None
    for task in result.manifest["spec"]["tasks"]:
        env = {e["name"]: e.get("value") for e in task["template"]["spec"]["containers"][0]["env"]}
        assert env["VPIPE_STALL_TIMEOUT"] == "45"


def test_restart_is_asked_once_per_episode_even_when_more_tasks_stall_after_it() -> None:
    """A stopped worker is seen first, the coordinator waiting on it a read later: one episode,
    one restart (a second RestartJob would restart the restarted job again)."""
    clock = FakeClock()
    worker = "vpipe:stalled count=1 tasks=worker[1] silent=worker[1] oldest=21 oldest_task=worker[1] time=4000000000"
    script: list[object] = [running(), say("vpipe:progress step=100", worker), None, say(STALLED), None, None,
                            job("Completed")]
    backend = Stallable(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress, on_stall="restart")
    assert backend.restarts == ["TasksStalled"]
    assert [n for n in progress.notes if "stalled:" in n] == [
        "job j: stalled: worker[1] (no heartbeat) for 21s",
        "job j: stalled: worker[1] (no heartbeat), chief[0] (no progress) for 21s"]
    assert result.stalled is not None and result.stalled["tasks"] == "chief[0],worker[1]"


def test_a_restarted_run_that_resumed_but_has_not_stepped_yet_is_starting_up_not_stalled() -> None:
    """After a restart the chief prints `resumed` at once, then needs its workers before its
    first step (seen: over 20 s on a loaded machine): only progress lines start the clock."""
    clock = FakeClock()

    def new_pod(backend: MemoryBackend) -> None:
        backend.logs[CHIEF] = ""

    script: list[object] = [running(), say("vpipe:progress step=100"), None, job("Restarting", retries=1), new_pod,
                            running(retries=1), say("vpipe:resumed step=100 path=/c/100"), *[None] * 8,
                            say("vpipe:progress step=120"), None, job("Completed", retries=1)]
    backend = Stallable(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress, on_stall="restart")
    assert backend.restarts == [] and result.stalled is None, progress.notes
