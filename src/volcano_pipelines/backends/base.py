"""The backend seam: submit (create or attach), watch (a stream of job states), cancel (abort /
delete) and results (failed pods, log tails). Every object crossing it has Volcano's and
Kubernetes' own JSON shape (a Job dict with `status.state.phase`, `status.taskStatusCount`,
`status.retryCount`; pod dicts with `status.containerStatuses[].state.terminated`), so the pure
readers in `volcano.status` serve every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

Job = dict[str, Any]
Pod = dict[str, Any]
# What stopping a step does to its job: delete it, abort it (kept as Aborted), or keep it running.
OnCancel = Literal["delete", "abort", "keep"]
ON_CANCEL_CHOICES: tuple[str, ...] = get_args(OnCancel)


@dataclass(frozen=True)
class Scheduling:
    """Why a job is still waiting, as far as the backend can tell."""

    problem: str | None = None  # one line for users: the scheduler's reason
    admitted: bool = False  # the gang was admitted (Volcano: PodGroup Inqueue) but pods are not out yet


class JobSession(Protocol):
    """One submitted job while a step waits for it. Entered as a context manager: background
    sources of hints (a failed-pod watch) run while it is open and stop when it closes."""

    def watch(self, window: Callable[[], float]) -> Iterator[Job | None]:
        """The job each time it changes, and None at least every `window()` seconds (a tick
        for deadlines and hints). Survives disconnects; ends when the job is gone."""
        ...

    def scheduling(self) -> Scheduling:
        """Asked while the job is Pending, at most every few seconds."""
        ...

    def nudge(self) -> None:
        """Ask the controller to look at the job again (Volcano: a SyncJob Command)."""
        ...

    def controller_warning(self) -> str | None:
        """The controller's newest warning about the job (`reason: message`), asked only when
        it should have completed the job and has not (volcano/completion.py)."""
        ...

    def restart(self, reason: str) -> None:
        """Restart the job now, every pod (Volcano: a RestartJob Command); counted in retryCount."""
        ...

    def abort(self, reason: str) -> str:
        """Stop every task and keep the job as Aborted; returns what was done: 'aborted', or
        'deleted' where aborting is not available."""
        ...

    def delete(self) -> None:
        """Stop every task and remove the job."""
        ...

    def failed_pods(self) -> list[Pod]:
        """Pods seen failing so far (they may be gone by the time the job ends)."""
        ...

    def pods(self) -> list[Pod]:
        """The job's pods now (one list at the end of a wait)."""
        ...

    def log_tail(self, pod: str, lines: int) -> str | None:
        """The last lines of a pod's log where available."""
        ...

    def missing(self) -> list[str]:
        """Information the backend could not get (e.g. a permission was refused), one line each."""
        ...

    def linger_seconds(self) -> float | None:
        """How long parameter servers kept running after the completion task finished, where
        the backend can measure it (None otherwise)."""
        ...


class Backend(Protocol):
    name: str

    def submit(self, manifest: Job) -> tuple[Job, bool]:
        """Create the job, or return the one this run already created (same run label).
        Returns (job, created)."""
        ...

    def get(self, namespace: str, name: str) -> Job | None:
        ...

    def session(self, job: Job, log_lines: int, *, watch_pods: bool = True) -> AbstractContextManager[JobSession]:
        """What the steps read and do of one job while it lasts. `watch_pods`: follow the job's
        pods meanwhile (the failed and deleted ones, their last log lines); a one-look reader
        (`vpipe status`) does without: at 11,000 pods the watch's first list would double what
        it holds."""
        ...
