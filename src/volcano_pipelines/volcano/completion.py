"""Whether Volcano should be ending a job by now, read from the job alone: its completion
condition met by the controller's own pod counts while the job is still Running.

Issue 41 saw why this matters: at 2,000 pods the test plane's etcd overflowed, Volcano's
controller failed every deletion, the chief had succeeded, and the step kept printing
"Running" for minutes. The job's spec says what completes it (volcano/common.py, slices.py):
a task whose TaskCompleted event is CompleteJob (the chief, or the workers in one task), or
`spec.minSuccess` pods succeeded (workers split over several tasks). Once that holds, the
controller moves the job to Completing within seconds; when it does not, the step says so
(steps/_waiting.py) with the controller's newest warning about the job."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["CompletionWatch", "completion_met", "controller_stuck_message", "last_success_at", "newest_warning"]

# How long a met completion condition may wait for the controller before it is said (a healthy
# controller takes seconds).
GRACE_SECONDS = 60.0


def _succeeded(status: Mapping[str, Any], task: str) -> int:
    counts = ((status.get("taskStatusCount") or {}).get(task) or {}).get("phase") or {}
    return int(counts.get("Succeeded") or 0)


def _completes_job(task: Mapping[str, Any]) -> bool:
    return any(p.get("action") == "CompleteJob" and "TaskCompleted" in [p.get("event"), *(p.get("events") or [])]
               for p in task.get("policies") or [])


def completion_met(job: Mapping[str, Any]) -> str | None:
    """What of the job's completion condition is met by Volcano's counts (`chief: 1/1
    succeeded`, `10000 pods succeeded (minSuccess 10000)`), while the job is Pending or
    Running; None otherwise. Pending too: at 11,001 pods the chief succeeded while the gang was
    still starting, and its TaskCompleted request waited minutes behind the job's thousands of
    pod events, which Volcano's controller syncs one at a time on one worker per job."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    if ((status.get("state") or {}).get("phase") or "Pending") not in ("Pending", "Running"):
        return None
    min_success = spec.get("minSuccess")
    if min_success:
        total = sum(_succeeded(status, str(name)) for name in (status.get("taskStatusCount") or {}))
        if total >= int(min_success):
            return f"{total} pods succeeded (minSuccess {int(min_success)})"
    for task in spec.get("tasks") or []:
        replicas = int(task.get("replicas") or 0)
        if replicas and _completes_job(task) and _succeeded(status, str(task.get("name"))) >= replicas:
            return f"{task.get('name')}: {replicas}/{replicas} succeeded"
    return None


def controller_stuck_message(met: str, seconds: float, warning: str | None) -> str:
    """The problem the step shows instead of a plain "Running"."""
    why = f"; its newest warning about the job: {warning}" if warning else "; no warning event about the job"
    return f"Volcano has not completed the job {seconds:.0f}s after {met} (its controller is behind or cannot act){why}"


def last_success_at(pods: Iterable[Mapping[str, Any]]) -> float | None:
    """When the newest of the succeeded pods ended (Unix seconds), from their containers'
    terminated states: about when a met completion condition became met, for a reader that
    was not watching (`vpipe status`); None when no pod says."""
    newest: float | None = None
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Succeeded":
            continue
        for container in status.get("containerStatuses") or []:
            finished = ((container.get("state") or {}).get("terminated") or {}).get("finishedAt")
            try:
                at = datetime.fromisoformat(str(finished).replace("Z", "+00:00")).timestamp() if finished else None
            except ValueError:
                at = None
            if at is not None and (newest is None or at > newest):
                newest = at
    return newest


def newest_warning(events: Iterable[Mapping[str, Any]]) -> str | None:
    """The newest Warning event as `reason: message` (e.g. `FailedDeletePod: etcdserver: mvcc:
    database space exceeded`); None without one."""
    warnings = [e for e in events if e.get("type") == "Warning"]
    if not warnings:
        return None
    newest = max(warnings, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return f"{newest.get('reason')}: {newest.get('message') or ''}".rstrip(": ")


@dataclass
class CompletionWatch:
    """How long the job's completion condition has been met while it stays Running: after
    `grace_seconds`, the problem to show; the controller's warning is read at most every
    `reread_seconds` (one list of the job's events)."""

    grace_seconds: float = GRACE_SECONDS
    reread_seconds: float = 30.0
    since: float | None = None
    read_at: float | None = None
    warning: str | None = None

    def problem(self, now: float, job: Mapping[str, Any], read_warning: Callable[[], str | None]) -> str | None:
        met = completion_met(job)
        if met is None:
            self.since = self.read_at = None
            return None
        self.since = now if self.since is None else self.since
        if now - self.since < self.grace_seconds:
            return None
        if self.read_at is None or now - self.read_at >= self.reread_seconds:
            self.read_at, self.warning = now, read_warning()
        return controller_stuck_message(met, now - self.since, self.warning)
