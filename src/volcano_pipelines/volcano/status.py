"""Reading Volcano objects: job phase and per-task counts, scheduling problems, the reason a
job failed. Pure: takes the dicts the API returned."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from volcano_pipelines.volcano.slices import SLICED_ROLES, role_of

__all__ = ["FAILED_PHASES", "FINAL_PHASES", "JOB_STOPPING_PHASES", "SUCCEEDED_PHASES", "JobStatus", "PodEnd", "PodFailure",
           "TaskCounts", "counts_from_pods", "counts_of_finished_job", "final_counts", "fold_slices", "format_progress", "job_status",
           "latest_counts", "pod_end", "pod_failure", "pod_task", "podgroup_name", "podgroup_phase", "restart_cause", "restarts_made",
           "scheduling_problem", "scheduling_problem_from_events"]

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
    # A finished job's pods that were pending or running when it ended and that the job's end
    # stopped and deleted (final_counts): counted, not lost with the pods.
    stopped: int = 0

    @property
    def empty(self) -> bool:
        return not (self.pending or self.running or self.succeeded or self.failed or self.stopped)

    def to_dict(self) -> dict[str, int]:
        return {"pending": self.pending, "running": self.running, "succeeded": self.succeeded, "failed": self.failed,
                "stopped": self.stopped}


@dataclass(frozen=True)
class JobStatus:
    phase: str
    # The restarts the job made: the one count users read everywhere (restarts_made()).
    retries: int = 0
    tasks: dict[str, TaskCounts] = field(default_factory=dict)
    reason: str | None = None
    message: str | None = None
    retry_count: int = 0  # Volcano's status.retryCount as it is (counts the failure that ends the job too)
    max_retry: int | None = None  # spec.maxRetry, where the job says

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
    cause: str | None = None  # PodEnd.cause: evicted, preempted, node lost, OOM killed, exit code N, ...

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "task": self.task,
            "cause": self.cause,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "message": self.message,
            "log_tail": self.log_tail,
        }

    def describe(self) -> str:
        parts = [f"pod {self.pod}"]
        if self.task:
            parts[0] += f" (task {self.task})"
        if self.cause and not self.cause.startswith("exit code"):
            parts[0] += f" {self.cause}"
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
    tasks = fold_slices(tasks)
    retry_count = int(status.get("retryCount") or 0)
    max_retry = (job.get("spec") or {}).get("maxRetry")
    max_retry = int(max_retry) if max_retry is not None else None
    return JobStatus(
        phase=state.get("phase") or "Pending",
        retries=restarts_made(retry_count, max_retry),
        tasks=tasks,
        reason=state.get("reason") or None,
        message=state.get("message") or None,
        retry_count=retry_count,
        max_retry=max_retry,
    )


def restarts_made(retry_count: int, max_retry: int | None) -> int:
    """How many times the job really restarted. Volcano's RestartJob adds one to retryCount
    and then, once retryCount has reached maxRetry, fails the job instead of restarting it: the
    failure that ends a job out of restarts is counted too (maxRetry 3: three runs, two
    restarts, retryCount 3). Without a maxRetry the count is taken as it is."""
    if max_retry is None or retry_count < max_retry:
        return retry_count
    return max(0, max_retry - 1)


def latest_counts(seen: Mapping[str, TaskCounts], current: Mapping[str, TaskCounts]) -> dict[str, TaskCounts]:
    """Per task, the newest counts that say anything (Volcano clears a finishing job's
    taskStatusCount). Counts of fewer pods than were seen before (a completing job's status
    once Volcano has deleted some of its running pods, the parameter servers) count the pods
    gone as stopped, so that none vanishes from the counts."""
    merged = dict(seen)
    for task, counts in current.items():
        if not counts.empty or task not in merged:
            before = merged.get(task)
            gone = _total(before) - _total(counts) if before is not None and not counts.empty else 0
            merged[task] = replace(counts, stopped=counts.stopped + gone) if gone > 0 else counts
    return merged


def _total(counts: TaskCounts) -> int:
    return counts.pending + counts.running + counts.succeeded + counts.failed + counts.stopped


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
    return fold_slices({task: TaskCounts(**counts) for task, counts in totals.items()})


def fold_slices(tasks: Mapping[str, TaskCounts]) -> dict[str, TaskCounts]:
    """Per role: the counts of a role split over several Volcano tasks (`worker`, `worker-s1`,
    ..., volcano/slices.py) added up, so that every display reads roles, at any size."""
    folded: dict[str, TaskCounts] = {}
    for task, counts in tasks.items():
        role = role_of(task, SLICED_ROLES)
        before = folded.get(role)
        folded[role] = counts if before is None else TaskCounts(
            **{k: v + counts.to_dict()[k] for k, v in before.to_dict().items()})
    return folded


def final_counts(seen: Mapping[str, TaskCounts], remaining: Mapping[str, TaskCounts]) -> dict[str, TaskCounts]:
    """Counts for a finished job, whose taskStatusCount Volcano clears as it deletes the pods:
    the pods that remain (Volcano keeps finished pods, deletes running ones) say what is running
    now; successes and failures are the most ever seen, because the last status update before
    the end may not have counted the last pods; the rest of the pods last seen (`seen`: the
    newest counts that said anything) were pending or running when the job ended and were
    stopped by it: `stopped`, so that no pod vanishes from the counts."""
    result: dict[str, TaskCounts] = {}
    for task in {**seen, **remaining}:
        before = seen.get(task, TaskCounts())
        now = remaining.get(task, TaskCounts())
        succeeded, failed = max(before.succeeded, now.succeeded), max(before.failed, now.failed)
        total = _total(before)
        result[task] = TaskCounts(
            pending=now.pending,
            running=now.running,
            succeeded=succeeded,
            failed=failed,
            stopped=max(0, total - succeeded - failed - now.pending - now.running),
        )
    return result


def counts_of_finished_job(job: Mapping[str, Any], phase: str, pods: Iterable[Mapping[str, Any]]) -> dict[str, TaskCounts]:
    """Per role, the pods of a job that has ended, read later (`vpipe status`), when no counts
    of the running job were seen: the pods that remain by phase; a Completed job had every
    replica, so the replicas no pod remains of were stopped by its end (Volcano deletes the
    pods still running: the parameter servers). A job that failed may never have made some of
    its pods: only what remains is counted."""
    remaining = counts_from_pods(pods)
    if phase != "Completed":
        return remaining
    replicas = fold_slices({t["name"]: TaskCounts(pending=int(t.get("replicas") or 0))
                            for t in (job.get("spec") or {}).get("tasks") or [] if t.get("name")})
    return final_counts(replicas, remaining)


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
    """The pod whose end comes first (by time) among those that failed, named by its cause
    (`pod_end`): evicted, preempted, node lost, OOM killed, exit code N. A pod killed by its
    deletion (exit 137/143) is reported only when no pod failed on its own: it is most often
    the job stopping the rest of the gang."""
    ends = [e for e in (pod_end(pod) for pod in pods) if e is not None]
    own = [e for e in ends if e.cause != "deleted"] or ends
    first = restart_cause(own)
    if first is None:
        return None
    return PodFailure(pod=first.pod, task=first.task, exit_code=first.exit_code, reason=first.reason,
                      message=first.message, cause=first.cause)


def format_progress(name: str, status: JobStatus, problem: str | None = None) -> str:
    tasks = "  ".join(
        f"{task}: {c.running} running, {c.succeeded} succeeded, {c.failed} failed, {c.pending} pending"
        + (f", {c.stopped} stopped" if c.stopped else "")
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


# --- what happened to a pod (issue 29): the cause users read instead of "exit code 137, reason Error"

# Phases in which the job's own controller stops pods (CompleteJob, TerminateJob, AbortJob,
# RestartJob, and maxRetry reached: Failed; Pending again after a restart, while the last run's
# pods go): a pod killed then is not a failure of its own.
JOB_STOPPING_PHASES = frozenset({"Completing", "Completed", "Terminating", "Terminated", "Aborting", "Aborted",
                                 "Restarting", "Failed", "Pending"})
# Kubernetes' DisruptionTarget condition reasons (pod disruption conditions, GA in 1.31).
_DISRUPTIONS = {
    "EvictionByEvictionAPI": "evicted",
    "PreemptionByScheduler": "preempted",
    "PreemptionByKubeScheduler": "preempted",  # the reason's name before 1.27
    "TerminationByKubelet": "evicted",  # node pressure or a graceful node shutdown
    "DeletionByTaintManager": "node lost",
    "DeletionByPodGC": "node lost",  # the pod's node is gone
}
# pod.status.reason values that name a disruption on their own (older kubelets, no condition).
_POD_REASONS = {"Evicted": "evicted", "Preempting": "preempted", "NodeLost": "node lost", "Terminated": "node lost",
                "Shutdown": "node lost", "NodeShutdown": "node lost"}
# Exit codes of a process stopped by a signal from outside (SIGKILL, SIGTERM): what the kubelet
# does to a deleted pod's containers.
_KILLED_EXIT_CODES = frozenset({137, 143})
# Causes that end a pod from outside (the pod itself did nothing wrong).
DISRUPTION_CAUSES = frozenset({"evicted", "preempted", "node lost", "deleted"})
STOPPED_BY_JOB = "stopped by the job"


@dataclass(frozen=True)
class PodEnd:
    """How one pod ended, in words: `cause` is one of evicted, preempted, node lost, OOM killed,
    exit code N, failed, deleted, or "stopped by the job" (the job's own policy ended it: not a
    failure)."""

    pod: str
    task: str | None
    cause: str
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    container: str | None = None
    node: str | None = None
    at: str | None = None  # when it ended (RFC 3339), where the pod says

    @property
    def failure(self) -> bool:
        """Whether this pod's end counts against the job (anything but the job stopping it)."""
        return self.cause != STOPPED_BY_JOB

    def describe(self) -> str:
        where = f"pod {self.pod}" + (f" (task {self.task})" if self.task else "")
        detail = []
        if self.exit_code is not None and not self.cause.startswith("exit code"):
            detail.append(f"exit code {self.exit_code}")
        if self.reason and self.reason != self.cause:
            detail.append(f"reason {self.reason}")
        text = f"{where} {self.cause}" + (f" ({', '.join(detail)})" if detail else "")
        return f"{text}: {self.message}" if self.message else text

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "task": self.task, "cause": self.cause, "exit_code": self.exit_code,
                "reason": self.reason, "message": self.message, "container": self.container, "node": self.node,
                "at": self.at}


def _disruption(status: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            return _DISRUPTIONS.get(condition.get("reason") or "", "evicted"), condition
    return None


def _first_bad_container(status: Mapping[str, Any]) -> tuple[str | None, Mapping[str, Any] | None]:
    """The container that ended worst: OOM-killed first, then the first non-zero exit, then
    any terminated one (for times)."""
    terminated = [(cs.get("name"), _terminated_state(cs))
                  for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]]
    ended = [(name, term) for name, term in terminated if term]
    for name, term in ended:
        if term.get("reason") == "OOMKilled":
            return name, term
    for name, term in ended:
        if int(term.get("exitCode") or 0) != 0:
            return name, term
    return (ended[0] if ended else (None, None))


def pod_end(pod: Mapping[str, Any], *, job_phase: str | None = None, deleted: bool = False) -> PodEnd | None:
    """What ended pod `pod`, or None while it runs or when it simply succeeded. `job_phase` is
    the job's phase when the pod was seen ending (a pod killed while the job completes,
    terminates or restarts was stopped by the job); `deleted`: the pod object is gone."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    name, task = meta.get("name", "?"), pod_task(pod)
    node = (pod.get("spec") or {}).get("nodeName")
    container, term = _first_bad_container(status)
    exit_code = int(term["exitCode"]) if term and term.get("exitCode") is not None else None
    finished = (term or {}).get("finishedAt")

    def end(cause: str, reason: str | None, message: str | None, at: str | None) -> PodEnd:
        return PodEnd(pod=name, task=task, cause=cause, exit_code=exit_code, reason=reason, message=message,
                      container=container, node=node, at=at or finished or meta.get("deletionTimestamp"))

    disruption = _disruption(status)
    if disruption is not None:
        cause, condition = disruption
        return end(cause, condition.get("reason"), condition.get("message"), condition.get("lastTransitionTime"))
    if status.get("reason") in _POD_REASONS:
        return end(_POD_REASONS[status["reason"]], status["reason"], status.get("message"), None)
    if term and term.get("reason") == "OOMKilled":
        return end("OOM killed", "OOMKilled", term.get("message"), None)
    # A container that had already ended before its pod was deleted ended on its own (a task
    # killed with SIGKILL, exit 137, then deleted by the restart its failure set off).
    being_deleted = (deleted or bool(meta.get("deletionTimestamp"))) and not _ended_before_deletion(meta, finished,
                                                                                                     exit_code)
    # A negative code is a signal as the local backend's processes report it (-15: SIGTERM).
    if being_deleted and (exit_code is None or exit_code in _KILLED_EXIT_CODES or exit_code < 0):
        if job_phase in JOB_STOPPING_PHASES:
            return end(STOPPED_BY_JOB, f"job {job_phase}", None, None)
        return end("deleted", (term or {}).get("reason"), (term or {}).get("message"), None)
    if exit_code:
        return end(f"exit code {exit_code}", (term or {}).get("reason") or status.get("reason"),
                   (term or {}).get("message") or status.get("message"), None)
    if status.get("phase") == "Failed":
        return end("failed", status.get("reason"), status.get("message"), None)
    return None


def _ended_before_deletion(meta: Mapping[str, Any], finished: str | None, exit_code: int | None) -> bool:
    """Whether the container ended before anyone asked to delete its pod. Kubernetes sets
    deletionTimestamp to the request's time plus the grace period, and a deletion sends SIGTERM
    first: a SIGKILL (137) in the very second of the request (times are in whole seconds) came
    from elsewhere (kill -9, the kernel), unless there was no grace period."""
    deletion = _parse_time(meta.get("deletionTimestamp"))
    ended = _parse_time(finished)
    if deletion is None or ended is None or meta.get("deletionGracePeriodSeconds") is None:
        return False  # not known: taken as the deletion's doing, as before
    grace = float(meta["deletionGracePeriodSeconds"])
    if grace <= 0:
        # The kubelet's last delete, once the containers stopped, sets the grace period to 0 and
        # the timestamp to that moment: when the deletion was asked for is no longer known (a
        # parameter server SIGTERMed by CompleteJob read as ending on its own, exit code 143).
        return False
    requested = deletion - grace
    return ended < requested or (ended <= requested and exit_code == 137)


def _parse_time(value: Any) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def restart_cause(ends: Iterable[PodEnd]) -> PodEnd | None:
    """The pod end that set off a restart: the earliest that counts as a failure (pods the job
    stopped while restarting are its consequence, not its cause); an end with a name (evicted,
    exit code N, ...) before a bare deletion, which is as often the job's own doing seen before
    its phase changed; an unknown time goes last."""
    failures = [e for e in ends if e.failure]
    if not failures:
        return None
    return min(failures, key=lambda e: (e.cause == "deleted", e.at is None, e.at or ""))
