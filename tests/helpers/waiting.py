"""The wait step run against the in-memory backend with an injected clock, and a progress that
records each job state and note it was shown."""

from __future__ import annotations

from tests.unit.steps.memory_backend import FakeClock, MemoryBackend
from volcano_pipelines.progress import Progress
from volcano_pipelines.steps._waiting import WaitPolicy, run
from volcano_pipelines.volcano.status import JobStatus
from volcano_pipelines.volcano.tf import build_tf_job
from volcano_pipelines.volcano.spec import JobOptions, TFJobSpec

MANIFEST = build_tf_job(TFJobSpec(job=JobOptions(name="j", namespace="ns", run_id="r1")))


class Recorder(Progress):
    def __init__(self) -> None:
        self.jobs: list[tuple[str, str | None]] = []
        self.notes: list[str] = []

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        self.jobs.append((status.phase, problem))

    def note(self, line: str) -> None:
        self.notes.append(line)

    def warn(self, line: str) -> None:
        self.notes.append(line)


def wait(backend: MemoryBackend, clock: FakeClock, progress: Progress | None = None, **policy: object):
    return run(backend, MANIFEST, WaitPolicy(**policy), progress, clock=clock, handle_signals=False)  # type: ignore[arg-type]
