"""Following a training's progress while the wait step runs: the in-memory backend plus the
follower's log reads (counted) and job annotations (recorded), script steps in which the chief
prints lines, and the wait itself."""

from __future__ import annotations

from collections.abc import Callable

from tests.helpers.progress import RecordingProgress
from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, job
from volcano_pipelines.steps._follow import FollowPolicy
from volcano_pipelines.steps._waiting import WaitPolicy, run
from volcano_pipelines.volcano.spec import JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

MANIFEST = build_tf_job(TFJobSpec(job=JobOptions(name="j", namespace="ns", run_id="r1"), chief=Role()))
CHIEF = "j-chief-0"


class Annotating(MemoryBackend):
    """The memory backend plus what the cluster session adds for the follower: its own log
    read (counted) and job annotations (recorded)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.reads: list[float] = []
        self.patches: list[tuple[float, dict[str, str]]] = []
        self.read_error: Exception | None = None

    def progress_log(self, pod: str, lines: int) -> str | None:
        self.reads.append(self.clock.now)
        if self.read_error is not None:
            raise self.read_error
        return self.logs.get(pod)

    def annotate(self, annotations: dict[str, str]) -> None:
        self.patches.append((self.clock.now, dict(annotations)))


def say(*lines: str) -> Callable[[MemoryBackend], None]:
    """A script step: the chief prints these lines (its log grows)."""
    def step(backend: MemoryBackend) -> None:
        backend.logs[CHIEF] = backend.logs.get(CHIEF, "") + "".join(line + "\n" for line in lines)
    return step


def running(retries: int = 0) -> dict[str, object]:
    return job("Running", retries=retries, tasks={"chief": {"Running": 1}})


def wait(backend: MemoryBackend, clock: FakeClock, progress: RecordingProgress, **follow: float) -> object:
    policy = WaitPolicy(follow=FollowPolicy(**follow))  # type: ignore[arg-type]
    return run(backend, MANIFEST, policy, progress, clock=clock, handle_signals=False)
