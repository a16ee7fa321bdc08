"""What the step shows at a job's end comes in the order it happened (issue 42 item 16): the
training's final figures, read once more at the end, before the final phase, never a progress
line after "Completed"."""

from __future__ import annotations

import pytest

from tests.helpers.following import Annotating, running, say, wait
from tests.helpers.progress import RecordingProgress
from tests.unit.steps.memory_backend import FakeClock, job
from volcano_pipelines.volcano.report_lines import TrainingProgress
from volcano_pipelines.volcano.status import JobStatus


class Ordered(RecordingProgress):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        self.events.append(f"job {status.phase}")

    def training(self, name: str, state: TrainingProgress) -> None:
        super().training(name, state)
        self.events.append(f"step {state.step}")


def test_the_last_progress_is_shown_before_the_final_phase() -> None:
    clock = FakeClock()
    # The chief's last lines come so late that only the final read sees them.
    script: list[object] = [running(), say("vpipe:progress step=100 total=200"), None, None, None,
                            say("vpipe:progress step=200 total=200"),
                            job("Completed", tasks={"chief": {"Succeeded": 1}})]
    progress = Ordered()
    wait(Annotating(script, clock, tick=5.0), clock, progress, interval_seconds=60)
    assert "step 200" in progress.events
    assert progress.events[-1] == "job Completed", progress.events
    assert progress.events.index("step 200") < progress.events.index("job Completed")


def test_the_logs_and_the_terminal_name_the_failed_pods_by_cause_as_ranges() -> None:
    import io

    from tests.unit.steps.memory_backend import MemoryBackend, failed_pod
    from volcano_pipelines.cli.progress import RichProgress
    from volcano_pipelines.progress import LineProgress
    from volcano_pipelines.steps._waiting import WaitPolicy, run
    from tests.helpers.following import MANIFEST

    def fail(backend: MemoryBackend) -> None:
        backend.failed = [failed_pod(f"j-worker-{i}", "worker", 1) for i in (3, 4, 5, 9)]

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, progress_type in ((io.StringIO(), LineProgress), (Terminal(), RichProgress)):
        clock = FakeClock()
        script: list[object] = [running(), fail, running(retries=1), job("Completed", tasks={"chief": {"Succeeded": 1}})]
        progress = progress_type(stream)  # type: ignore[abstract]
        run(MemoryBackend(script, clock, tick=5.0), MANIFEST, WaitPolicy(), progress, clock=clock, handle_signals=False)
        progress.close()
        text = stream.getvalue()
        assert "failed: exit code 1 (4): worker[3-5,9]" in text, text
        assert "restarts (1): exit code 1" in text, text


def test_a_warning_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    import io
    import logging

    from tests.unit.steps.memory_backend import MemoryBackend, failed_pod
    from tests.helpers.following import MANIFEST
    from volcano_pipelines.progress import LineProgress, Progress
    from volcano_pipelines.steps._waiting import WaitPolicy, run

    def fail(backend: MemoryBackend) -> None:
        backend.failed = [failed_pod("j-worker-3", "worker", 1)]

    def wait(progress: Progress) -> list[str]:
        caplog.clear()
        clock = FakeClock()
        script: list[object] = [running(), fail, running(retries=1), job("Completed", tasks={"chief": {"Succeeded": 1}})]
        with caplog.at_level(logging.INFO):
            run(MemoryBackend(script, clock, tick=5.0), MANIFEST, WaitPolicy(), progress, clock=clock,
                handle_signals=False)
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]

    stream = io.StringIO()
    logged = wait(LineProgress(stream))
    shown = [line for line in stream.getvalue().splitlines() if "j-worker-3" in line]
    # The pod's failure, then the restart it caused: one line each, in the step's log only.
    assert len(shown) == 2 and all(" WARNING job j: " in line for line in shown), shown
    assert not [m for m in logged if "j-worker-3" in m], logged
    # Without a display (library use): logged, once each.
    assert len([m for m in wait(Progress()) if "j-worker-3" in m]) == 2


def test_a_cancel_shows_on_the_display_before_the_job_is_stopped() -> None:
    from tests.unit.steps.memory_backend import MemoryBackend
    from tests.helpers.following import MANIFEST
    from volcano_pipelines.steps._waiting import Cancelled, StopSignal, WaitPolicy, run

    class Shown(Ordered):
        def job(self, name: str, status: JobStatus, problem: str | None) -> None:
            self.events.append(f"job {status.phase}: {problem}")

    class Stopping(MemoryBackend):
        def delete(self) -> None:
            progress.events.append("deleted")
            super().delete()

    clock = FakeClock()
    progress = Shown()
    with pytest.raises(Cancelled):
        run(Stopping([running(), StopSignal("cancelled by SIGINT")], clock), MANIFEST, WaitPolicy(), progress,
            clock=clock, handle_signals=False)
    assert progress.events[-2:] == ["job Running: cancelled by SIGINT: stopping the job (on_cancel=delete)",
                                    "deleted"], progress.events
