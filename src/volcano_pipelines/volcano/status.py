"""Reading Volcano objects: job phase and per-task counts, scheduling problems, the reason a
job failed. Pure: takes the dicts the API returned."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAILED_PHASES", "FINAL_PHASES", "SUCCEEDED_PHASES", "JobStatus", "PodFailure", "TaskCounts", "counts_from_pods", "final_counts", "format_progress", "job_status", "latest_counts", "pod_failure", "pod_task", "podgroup_name", "podgroup_phase", "scheduling_problem", "scheduling_problem_from_events"]

SUCCEEDED_PHASES = frozenset({"Completed"})
FAILED_PHASES = frozenset({"Failed", "Aborted", "Terminated"})
FINAL_PHASES = SUCCEEDED_PHASES | FAILED_PHASES
# Kubernetes pod phases, folded into the four counts users read.
_POD_PHASE_COUNT = {"Pending": "pending", "Running": "running", "Succeeded": "succeeded", "Failed": "failed", "Unknown": "pending"}


@dataclass(frozen=True)
class TaskCounts:
    pending: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0

    @property
    def empty(self) -> bool:
        return not (self.pending or self.running or self.succeeded or self.failed)

    def to_dict(self) -> dict[str, int]:
        return {"pending": self.pending, "running": self.running, "succeeded": self.succeeded, "failed": self.failed}


@dataclass(frozen=True)
class JobStatus:
    phase: str
    retries: int = 0
    tasks: dict[str, TaskCounts] = field(default_factory=dict)
    reason: str | None = None
    message: str | None = None

    @property
    def finished(self) -> bool:
        return self.phase in FINAL_PHASES

    @property
    def succeeded(self) -> bool:
        return self.phase in SUCCEEDED_PHASES


@dataclass(frozen=True)
class PodFailure:
    pod: str
    task: str | None
    exit_code: int | None
    reason: str | None
    message: str | None
    log_tail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "task": self.task,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "message": self.message,
            "log_tail": self.log_tail,
        }

    def describe(self) -> str:
        parts = [f"pod {self.pod}"]
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.reason:
            parts.append(f"reason {self.reason}")
        text = ", ".join(parts)
        return f"{text}: {self.message}" if self.message else text


def job_status(job: Mapping[str, Any], task_names: Iterable[str] = ()) -> JobStatus:
    status = job.get("status") or {}
    state = status.get("state") or {}
    tasks: dict[str, TaskCounts] = {name: TaskCounts() for name in task_names}
    for t in (job.get("spec") or {}).get("tasks") or []:
        tasks.setdefault(t["name"], TaskCounts())
    for name, counts in (status.get("taskStatusCount") or {}).items():
        totals = {"pending": 0, "running": 0, "succeeded": 0, "failed": 0}
        for pod_phase, n in ((counts or {}).get("phase") or {}).items():
            totals[_POD_PHASE_COUNT.get(pod_phase, "pending")] += int(n)
        tasks[name] = TaskCounts(**totals)
    return JobStatus(
        phase=state.get("phase") or "Pending",
        retries=int(status.get("retryCount") or 0),
        tasks=tasks,
        reason=state.get("reason") or None,
        message=state.get("message") or None,
    )


def latest_counts(seen: Mapping[str, TaskCounts], current: Mapping[str, TaskCounts]) -> dict[str, TaskCounts]:
    """Per task, the newest counts that say anything (Volcano clears a finishing job's
    taskStatusCount)."""
    merged = dict(seen)
    for task, counts in current.items():
        if not counts.empty or task not in merged:
            merged[task] = counts
    return merged


def pod_task(pod: Mapping[str, Any]) -> str | None:
    meta = pod.get("metadata") or {}
    return (meta.get("annotations") or {}).get("volcano.sh/task-spec") or (meta.get("labels") or {}).get(
        "volcano.sh/task-spec"
    )


def counts_from_pods(pods: Iterable[Mapping[str, Any]]) -> dict[str, TaskCounts]:
    totals: dict[str, dict[str, int]] = {}
    for pod in pods:
        task = pod_task(pod)
        if task is None:
            continue
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        bucket = totals.setdefault(task, {"pending": 0, "running": 0, "succeeded": 0, "failed": 0})
        bucket[_POD_PHASE_COUNT.get(phase, "pending")] += 1
    return {task: TaskCounts(**counts) for task, counts in totals.items()}


def final_counts(seen: Mapping[str, TaskCounts], remaining: Mapping[str, TaskCounts]) -> dict[str, TaskCounts]:
    """Counts for a finished job: the pods that remain (Volcano keeps finished pods, deletes
    running ones) say what is running now; successes and failures are the most ever seen,
    because the last status update before the end may not have counted the last pods."""
    result: dict[str, TaskCounts] = {}
    for task in {**seen, **remaining}:
        before = seen.get(task, TaskCounts())
        now = remaining.get(task, TaskCounts())
        result[task] = TaskCounts(
            pending=now.pending,
            running=now.running,
            succeeded=max(before.succeeded, now.succeeded),
            failed=max(before.failed, now.failed),
        )
    return result


def podgroup_name(job: Mapping[str, Any]) -> str:
    """Volcano names a job's PodGroup `<job>-<job uid>`."""
    meta = job["metadata"]
    return f"{meta['name']}-{meta['uid']}"


def podgroup_phase(podgroup: Mapping[str, Any] | None) -> str | None:
    """Pending (waiting for resources), Inqueue (admitted, pods may be created), Running..."""
    return ((podgroup or {}).get("status") or {}).get("phase")


def scheduling_problem(podgroup: Mapping[str, Any] | None) -> str | None:
    """The scheduler's latest reason a gang cannot start, from the PodGroup's conditions."""
    if not podgroup:
        return None
    conditions = (podgroup.get("status") or {}).get("conditions") or []
    for condition in reversed(conditions):
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            reason = condition.get("reason") or "Unschedulable"
            message = condition.get("message") or ""
            return f"{reason}: {message}".rstrip(": ")
    return None


def scheduling_problem_from_events(events: Iterable[Mapping[str, Any]]) -> str | None:
    """Fallback when the PodGroup says nothing: the newest scheduling warning event."""
    interesting = [
        e for e in events
        if e.get("type") == "Warning" and e.get("reason") in ("FailedScheduling", "Unschedulable", "PodGroupPending")
    ]
    if not interesting:
        return None
    newest = max(interesting, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return f"{newest.get('reason')}: {newest.get('message') or ''}".rstrip(": ")


def _terminated_state(container_status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    state = container_status.get("state") or {}
    last = container_status.get("lastState") or {}
    return state.get("terminated") or last.get("terminated")


def pod_failure(pods: Iterable[Mapping[str, Any]]) -> PodFailure | None:
    """The first pod (by finish time) that failed: a non-zero exit code or phase Failed."""
    failures: list[tuple[str, PodFailure]] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        task_name = pod_task(pod)
        for cs in status.get("containerStatuses") or []:
            term = _terminated_state(cs)
            if term and int(term.get("exitCode") or 0) != 0:
                failures.append(
                    (
                        term.get("finishedAt") or "",
                        PodFailure(
                            pod=meta.get("name", "?"),
                            task=task_name,
                            exit_code=int(term["exitCode"]),
                            reason=term.get("reason") or status.get("reason"),
                            message=term.get("message") or status.get("message"),
                        ),
                    )
                )
                break
        else:
            if status.get("phase") == "Failed":
                failures.append(
                    (
                        "~",  # unknown finish time: after those that have one
                        PodFailure(
                            pod=meta.get("name", "?"),
                            task=task_name,
                            exit_code=None,
                            reason=status.get("reason"),
                            message=status.get("message"),
                        ),
                    )
                )
    if not failures:
        return None
    return min(failures, key=lambda f: f[0])[1]


def format_progress(name: str, status: JobStatus, problem: str | None = None) -> str:
    tasks = "  ".join(
        f"{task}: {c.running} running, {c.succeeded} succeeded, {c.failed} failed, {c.pending} pending"
        for task, c in status.tasks.items()
    )
    line = f"job {name}: {status.phase}"
    if status.retries:
        line += f" (retries {status.retries})"
    if tasks:
        line += f" | {tasks}"
    if problem:
        line += f" | waiting: {problem}"
    return line
