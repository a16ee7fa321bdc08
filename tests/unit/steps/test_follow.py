"""Following the training's progress reports while the step waits (steps/_follow.py), against
the in-memory backend with an injected clock: what is read, how often, what is shown and
annotated, and what the result carries. Nothing sleeps."""

from __future__ import annotations

import json

import pytest

from tests.helpers.following import Annotating, CHIEF, MANIFEST, running, say, wait
from tests.helpers.progress import RecordingProgress
from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, job
from volcano_pipelines.steps._follow import FollowPolicy
from volcano_pipelines.steps._waiting import WaitPolicy, job_result, run
from volcano_pipelines.volcano.report_lines import CHECKPOINT_ANNOTATION, PROGRESS_ANNOTATION


def test_progress_is_read_shown_annotated_and_kept_in_the_result() -> None:
    clock = FakeClock()
    script: list[object] = [running()]
    for step in range(1, 13):  # a report every other tick of 5 s
        script += [say(f"[t] vpipe:progress step={step * 100} total=1200 loss={1 / step:.3f} "
                       f"examples_per_second=640.0"), None]
        if step % 4 == 0:
            script += [say(f"vpipe:checkpoint step={step * 100} path=/logs/ckpt-{step * 100}")]
    script += [job("Completed", tasks={"chief": {"Succeeded": 1}})]
    backend = Annotating(script, clock, tick=5.0)
    progress = RecordingProgress()
    result = wait(backend, clock, progress, interval_seconds=15, annotate_interval_seconds=30)

    # Bounded reads: the first as soon as it runs, then at most one per 15 s, plus a final one.
    gaps = [b - a for a, b in zip(backend.reads[:-2], backend.reads[1:-1], strict=True)]
    assert gaps and min(gaps) >= 15
    assert len(backend.reads) <= 2 + (backend.reads[-1] - backend.reads[0]) // 15
    # What users saw: steps never go back, and an ETA once there is a rate.
    steps = [s.step for s in progress.training_states]
    assert steps == sorted(steps) and steps[-1] == 1200
    assert any(s.eta_seconds is not None and s.eta_seconds > 0 for s in progress.training_states)
    # Patched only with changes, at most every 30 s (the final patch may come sooner).
    times = [t for t, _ in backend.patches]
    assert all(b - a >= 30 for a, b in zip(times[:-2], times[1:-1], strict=True))
    assert all(patch for _, patch in backend.patches)
    last = {key: value for _, patch in backend.patches for key, value in patch.items()}
    assert json.loads(last[PROGRESS_ANNOTATION])["step"] == 1200
    assert json.loads(last[CHECKPOINT_ANNOTATION])["path"] == "/logs/ckpt-1200"
    # The result's final figures.
    assert result.succeeded and result.progress is not None
    assert result.progress["step"] == 1200 and result.progress["total"] == 1200
    assert result.progress["loss"] == 0.083 and result.progress["examples_per_second"] == 640.0
    assert result.last_checkpoint is not None and result.last_checkpoint["step"] == 1200
    assert result.resumed_from_step is None  # it started fresh
    assert not any("no progress reported" in n for n in progress.notes)


def test_a_job_whose_code_reports_nothing_works_as_before() -> None:
    clock = FakeClock()
    backend = Annotating([running(), say("epoch 1 done"), None, None, job("Completed")], clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress)
    assert result.succeeded and result.progress is None and result.last_checkpoint is None
    assert backend.patches == [] and progress.training_states == []
    assert "job j: no progress reported" in progress.notes
    assert result.to_dict()["progress"] is None


def test_a_log_that_cannot_be_read_never_fails_the_step() -> None:
    clock = FakeClock()
    backend = Annotating([running(), None, None, job("Completed")], clock)
    backend.read_error = RuntimeError("kubelet unreachable")
    result = wait(backend, clock, RecordingProgress())
    assert result.succeeded and result.progress is None and backend.reads


@pytest.mark.parametrize("where", ["progress_log", "annotate"])
def test_a_sigterm_that_lands_in_a_read_allowed_to_fail_still_cancels(where: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop signal's handler raises in the main thread wherever it is; in the follower's log
    read or annotation (`except Exception`: those may fail without failing the step) a Cancelled
    raised there was swallowed and the step waited on (CI: a SIGTERMed step never exited). A real
    SIGTERM sent from inside each: the step cancels, applies on_cancel, and the job's later
    Completed is never reached."""
    import os
    import signal

    from volcano_pipelines.steps._waiting import Cancelled

    clock = FakeClock()
    backend = Annotating([running(), say("vpipe:progress step=100 total=1200"), None, None, None, job("Completed")],
                         clock)
    original = getattr(backend, where)
    sent: list[str] = []

    def signalled(*args: object) -> object:
        if not sent:
            sent.append(where)
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the guarded call
        return original(*args)

    monkeypatch.setattr(backend, where, signalled)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Cancelled) as info:
        run(backend, MANIFEST, WaitPolicy(follow=FollowPolicy(), on_cancel="delete"), RecordingProgress(), clock=clock)
    assert sent == [where] and str(info.value) == "cancelled by SIGTERM; job ns/j deleted"
    assert "delete" in backend.calls and backend.open_sessions == 0
    assert signal.getsignal(signal.SIGTERM) is before  # the step's handler is gone again


def test_a_restarted_job_says_where_it_resumed() -> None:
    clock = FakeClock()

    def new_pod(backend: MemoryBackend) -> None:
        backend.logs[CHIEF] = ""  # the restarted pod's log starts empty

    script: list[object] = [
        running(), say("vpipe:progress step=300 total=1000", "vpipe:checkpoint step=300 path=/c/300"), None, None,
        None, job("Restarting", retries=1), new_pod, running(retries=1),
        say("vpipe:resumed step=300 path=/c/300", "vpipe:progress step=400 total=1000"), None, None, None,
        job("Completed", retries=1),
    ]
    backend = Annotating(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress, interval_seconds=5)
    assert result.resumed_from_step == 300 and result.retries == 1
    assert result.progress is not None and result.progress["step"] == 400
    assert any(s.resumed_from_step == 300 for s in progress.training_states)


def test_a_restart_without_a_resume_line_shows_the_new_attempts_checkpoint_and_steps() -> None:
    """Code that cannot resume starts again from 0 after a restart: the step shows the new
    attempt's lower checkpoint (not the old attempt's higher one) as soon as it is written."""
    clock = FakeClock()

    def new_pod(backend: MemoryBackend) -> None:
        backend.logs[CHIEF] = ""

    script: list[object] = [
        running(), say("vpipe:progress step=800 total=1000", "vpipe:checkpoint step=800 path=/c/800"), None, None,
        None, job("Restarting", retries=1), new_pod, running(retries=1),
        say("vpipe:progress step=100 total=1000", "vpipe:checkpoint step=100 path=/c/100"), None, None, None,
        job("Completed", retries=1),
    ]
    backend = Annotating(script, clock)
    progress = RecordingProgress()
    result = wait(backend, clock, progress, interval_seconds=5)
    assert result.retries == 1 and result.resumed_from_step is None
    assert result.last_checkpoint is not None and result.last_checkpoint["step"] == 100, result.last_checkpoint
    assert result.progress is not None and result.progress["step"] == 100


def test_the_watch_window_shortens_to_the_next_read_only_while_it_runs() -> None:
    clock = FakeClock()
    backend = Annotating([job("Pending"), None, running(), None, None, job("Completed")], clock, tick=2.0)
    wait(backend, clock, RecordingProgress(), interval_seconds=3)
    # While pending: the hint interval (5 s); once running: never longer than the read interval.
    assert backend.windows[0] == 5 and max(backend.windows[3:]) <= 3


def test_following_can_be_turned_off() -> None:
    clock = FakeClock()
    backend = Annotating([running(), say("vpipe:progress step=1 total=2"), None, job("Completed")], clock)
    progress = RecordingProgress()
    result = run(backend, MANIFEST, WaitPolicy(follow=FollowPolicy(enabled=False)), progress, clock=clock,
                 handle_signals=False)
    assert backend.reads == [] and result.progress is None and progress.notes == []


def test_status_reads_the_figures_from_the_annotations() -> None:
    clock = FakeClock()
    backend = Annotating([], clock)
    backend.current = job("Running")
    backend.current["metadata"]["annotations"] = {
        PROGRESS_ANNOTATION: '{"step":50,"total":100,"eta_seconds":30.0,"resumed_from_step":20}',
        CHECKPOINT_ANNOTATION: '{"step":40,"path":"/c/40","time":"2026-01-01T00:00:00Z"}'}
    result = job_result(backend, "ns", "j")
    assert result.progress == {"step": 50, "total": 100, "eta_seconds": 30.0}
    assert result.last_checkpoint == {"step": 40, "path": "/c/40", "time": "2026-01-01T00:00:00Z"}
    assert result.resumed_from_step == 20


def test_a_bad_progress_interval_is_refused_before_anything_is_created(tmp_path: object) -> None:
    import pytest

    from volcano_pipelines.errors import InputError
    from volcano_pipelines.steps import train_tf

    with pytest.raises(InputError) as err:
        train_tf("j", backend="local", local_dir=str(tmp_path), progress_interval=-5)
    assert err.value.field == "progress_interval" and "3600" in str(err.value)
    assert not any(tmp_path.iterdir())  # type: ignore[attr-defined]


@pytest.mark.parametrize(("interval", "expected"), [
    (0, None), (-1, None), (2, (2.0, 10.0)), (5, (5.0, 10.0)), (15, (15.0, 30.0)), (60, (60.0, 120.0)),
])
def test_the_progress_interval_sets_reads_and_a_bounded_annotation_rate(interval: float,
                                                                        expected: tuple[float, float] | None) -> None:
    policy = FollowPolicy.every(interval)
    if expected is None:
        assert not policy.enabled
    else:
        assert policy.enabled and (policy.interval_seconds, policy.annotate_interval_seconds) == expected
