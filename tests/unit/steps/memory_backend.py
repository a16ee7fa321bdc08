"""An in-memory backend for the wait policy's unit tests: the job goes through a scripted list
of states while an injected clock advances, so every behaviour is checked without sleeping.
It implements the same protocol as the cluster and local backends (backends/base.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from tests.helpers.clock import VirtualClock
from volcano_pipelines.backends.base import Job, Pod, Scheduling


class FakeClock(VirtualClock):
    """The virtual clock at 1000 s: a time a job's timestamps can be before."""

    def __init__(self) -> None:
        super().__init__(start=1000.0)


def job(phase: str, *, retries: int = 0, tasks: dict[str, dict[str, int]] | None = None, message: str | None = None,
        created: str = "2026-01-01T00:00:00Z", changed: str = "2026-01-01T00:01:40Z", name: str = "j") -> Job:
    """A Volcano Job dict in the shape the API server returns."""
    state: dict[str, Any] = {"phase": phase, "lastTransitionTime": changed}
    if message:
        state["message"] = message
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "uid": "u1", "creationTimestamp": created,
                     "labels": {"volcano-pipelines/run": "r1", "volcano-pipelines/step": "train"}},
        "spec": {"tasks": [{"name": "ps"}, {"name": "worker"}]},
        "status": {"state": state, "retryCount": retries,
                   "taskStatusCount": {t: {"phase": counts} for t, counts in (tasks or {}).items()}},
    }


def failed_pod(name: str, task: str, exit_code: int, finished: str = "2026-01-01T00:01:00Z") -> Pod:
    return {
        "metadata": {"name": name, "uid": name, "annotations": {"volcano.sh/task-spec": task}},
        "status": {"phase": "Failed", "containerStatuses": [
            {"name": "tensorflow", "state": {"terminated": {"exitCode": exit_code, "reason": "Error", "finishedAt": finished}}}
        ]},
    }


Step = Job | None | BaseException | Callable[["MemoryBackend"], None]


class MemoryBackend:
    name = "memory"

    def __init__(self, script: list[Step], clock: FakeClock, *, tick: float = 5.0, existing: Job | None = None,
                 after_abort: list[Step] | None = None, abort_result: str = "aborted") -> None:
        self.script = list(script)
        self.after_abort = list(after_abort or [])
        self.clock = clock
        self.tick = tick
        self.existing = existing
        self.abort_result = abort_result
        self.calls: list[str] = []
        self.windows: list[float] = []
        self.hint = Scheduling()
        self.warning: str | None = None  # the controller's newest warning about the job
        self.failed: list[Pod] = []
        self.remaining_pods: list[Pod] = []
        self.logs: dict[str, str] = {}
        self.notes: list[str] = []
        self.linger: float | None = None
        self.current: Job | None = None
        self.open_sessions = 0

    # Backend
    def submit(self, manifest: Job) -> tuple[Job, bool]:
        self.calls.append("submit")
        if self.existing is not None:
            self.current = copy.deepcopy(self.existing)
            return self.current, False
        self.current = copy.deepcopy(manifest)
        self.current["metadata"].setdefault("uid", "u1")
        self.current["status"] = {"state": {"phase": "Pending"}}
        return self.current, True

    def get(self, namespace: str, name: str) -> Job | None:
        return self.current

    def session(self, job: Job, log_lines: int, *, watch_pods: bool = True) -> MemoryBackend:
        return self

    def __enter__(self) -> MemoryBackend:
        self.open_sessions += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self.open_sessions -= 1

    # JobSession
    def watch(self, window: Callable[[], float]) -> Iterator[Job | None]:
        if self.current is not None:
            yield self.current
        source = self.after_abort if "abort" in self.calls else self.script
        while source:
            self.windows.append(window())
            self.clock.advance(self.tick)
            step = source.pop(0)
            if isinstance(step, BaseException):
                raise step
            if callable(step):
                step(self)
                continue
            if step is not None:
                self.current = step
            yield step

    def scheduling(self) -> Scheduling:
        self.calls.append("scheduling")
        return self.hint

    def nudge(self) -> None:
        self.calls.append("nudge")

    def controller_warning(self) -> str | None:
        self.calls.append("controller_warning")
        return self.warning

    def abort(self, reason: str) -> str:
        self.calls.append("abort")
        self.abort_reason = reason
        return self.abort_result

    def delete(self) -> None:
        self.calls.append("delete")

    def failed_pods(self) -> list[Pod]:
        return list(self.failed)

    def pods(self) -> list[Pod]:
        return list(self.remaining_pods)

    def log_tail(self, pod: str, lines: int) -> str | None:
        return self.logs.get(pod)

    def missing(self) -> list[str]:
        return list(self.notes)

    def linger_seconds(self) -> float | None:
        return self.linger
