"""Riding through restarts (issue 29) and the record of what happened (issue 30), for the wait
in steps/_waiting.py: each pod that ends badly is named as it happens (evicted, preempted,
node lost, OOM killed, exit code N; pods the job's own policy stops are not failures), each
restart of the job is reported with its cause, a job that ran out of restarts says so, a job
Volcano ended before any pod ran says why, and the post-mortem record is saved before the
step lets anything delete the pods."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from volcano_pipelines.backends.base import Job, JobSession, Pod
from volcano_pipelines.postmortem import POST_MORTEM_DIR_ENV
from volcano_pipelines.progress import Progress
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.volcano.status import FAILED_PHASES, PodEnd, job_status, pod_end, restart_cause

__all__ = ["POST_MORTEM_DIR_ENV", "RestartTracker", "finish_result", "save_post_mortem", "saved_result"]

log = logging.getLogger(__name__)


class RestartTracker:
    """What happened to the job's pods, seen through the session's failed-pod list while the
    step waits. Restarts are counted from the job's retryCount (Volcano's own count); the cause
    of each is the earliest pod failure seen since the previous one."""

    # How long a restart whose only known cause is a bare deletion waits for a named one (the
    # evicted pod's DisruptionTarget reaches the pod watch after Volcano has acted on it).
    NAMED_CAUSE_GRACE_SECONDS = 10.0

    def __init__(self, namespace: str, name: str, progress: Progress,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.namespace, self.name = namespace, name
        self.progress = progress
        self.clock = clock
        self.pending_since: float | None = None
        self.restarts: list[dict[str, Any]] = []
        self.retries_seen: int | None = None  # retryCount when the step attached
        self.ends: dict[str, PodEnd] = {}  # pod uid -> its end, as first classified
        self.unused: list[str] = []  # uids of failures not yet given as a restart's cause
        self.last_failure: PodEnd | None = None
        self.any_pod = False
        self.pending = 0  # restarts seen before any cause for them was
        self.expected: list[tuple[dict[str, Any], str]] = []  # restarts the step asked for itself, with their cause

    def expect(self, cause: dict[str, Any], text: str) -> None:
        """The step itself asked for the next restart (--on-stall restart): its cause, unless a
        pod failure comes first."""
        self.expected.append((cause, text))

    def observe(self, job: Job, failed: list[Pod]) -> None:
        status = job_status(job)
        if any(counts.running or counts.succeeded or counts.failed for counts in status.tasks.values()) or failed:
            self.any_pod = True
        for pod in failed:
            uid = (pod.get("metadata") or {}).get("uid") or (pod.get("metadata") or {}).get("name") or "?"
            end = pod_end(pod, job_phase=status.phase)
            if end is None:
                continue
            before = self.ends.get(uid)
            # A pod first seen being deleted and later named (a DisruptionTarget, an exit code)
            # is re-read; one already counted keeps its first reading.
            if before is not None and (before.cause not in ("deleted", "failed") or end == before):
                continue
            self.ends[uid] = end
            if before is None:
                self.unused.append(uid)
            if end.failure:
                self.last_failure = end
                if end.cause != "deleted":  # a deletion is named when it causes a restart
                    self.progress.warn(f"job {self.name}: {end.describe()}")
        if self.retries_seen is None:
            self.retries_seen = status.retries
        while status.retries > self.retries_seen:
            self.retries_seen += 1
            self.pending += 1
            if self.pending_since is None:
                self.pending_since = self.clock()
        self._resolve(final=False)

    def _resolve(self, final: bool) -> None:
        while self.pending:
            cause = restart_cause(self.ends[uid] for uid in self.unused)
            if cause is None and self.expected:
                asked, text = self.expected.pop(0)
                self.pending -= 1
                self.pending_since = self.clock() if self.pending else None
                self._add(asked, text)
                continue
            if cause is None and not final:
                return  # its cause may be on the way (the pod watch and the job watch are two streams)
            waited = self.clock() - (self.pending_since if self.pending_since is not None else self.clock())
            if cause is not None and cause.cause == "deleted" and not final and waited < self.NAMED_CAUSE_GRACE_SECONDS:
                return  # a deletion may be the job's own doing: give the named cause a moment to arrive
            self.pending -= 1
            self.pending_since = self.clock() if self.pending else None
            self.unused = []
            self._add(cause.to_dict() if cause else {"cause": "unknown"},
                      cause.describe() if cause else "cause not seen (the step saw no pod end before it)")

    def _add(self, cause: dict[str, Any], text: str) -> None:
        number = len(self.restarts) + 1
        entry: dict[str, Any] = {"number": number, **cause, "text": f"restart {number}: {text}"}
        self.restarts.append(entry)
        self.progress.warn(f"job {self.name}: {entry['text']}")

    def finish(self) -> None:
        self._resolve(final=True)

    def final_cause(self) -> PodEnd | None:
        """The cause of the failure that ended a job out of restarts: the earliest pod end not
        given as a restart's cause."""
        return restart_cause(self.ends[uid] for uid in self.unused)


def save_post_mortem(session: JobSession, restarts: list[dict[str, Any]],
                     stalled: dict[str, Any] | None = None, cancelled: str | None = None) -> dict[str, Any] | None:
    """The session's post-mortem record, where the backend can write one (None otherwise);
    `stalled`: the hung tasks the step saw; `cancelled`: the step was cancelled and stops the
    job (the record says so beside the phase the job had then)."""
    write = getattr(session, "post_mortem", None)
    if write is None:
        return None
    extra = {k: v for k, v in (("stalled", stalled), ("cancelled", cancelled)) if v}
    saved: dict[str, Any] | None = write(restarts, **extra)
    return saved


def finish_result(result: TrainResult, job: Job, session: JobSession, tracker: RestartTracker,
                  *, post_mortem: bool = True, log_lines: int = 20,
                  stalled: dict[str, Any] | None = None) -> TrainResult:
    """The result of a finished (or given-up) wait, completed with the restarts, a message that
    names the real end (out of restarts; ended before any pod ran) and the post-mortem."""
    tracker.finish()
    result.restarts = list(tracker.restarts)
    status = job_status(job)
    meta = job.get("metadata") or {}
    where = f"job {meta.get('namespace')}/{meta.get('name')} {status.phase}"
    if status.phase in FAILED_PHASES:
        if status.max_retry is not None and status.retry_count >= status.max_retry and status.retry_count > 0:
            # Out of restarts: the failure that ended the job was no restart (restarts_made); its
            # cause is the earliest pod end since the last restart.
            final = tracker.final_cause()
            if final is not None:
                last = final.describe()
                if result.failure is None or result.failure.get("pod") != final.pod:
                    # The failure reported is the last run's, the one the message names.
                    result.failure = {
                        **{k: v for k, v in final.to_dict().items() if k in ("pod", "task", "cause", "exit_code",
                                                                             "reason", "message")},
                        "log_tail": session.log_tail(final.pod, log_lines) if log_lines > 0 else None}
            elif tracker.last_failure is not None:
                last = tracker.last_failure.describe()
            elif result.failure is not None:
                last = (result.message or "").split(": ", 1)[-1]
            else:
                last = "not seen by the step"
            result.message = (f"{where}: restarted {status.retries} time(s), max_retry {status.max_retry} reached: "
                              f"last cause {last}")
        elif not tracker.any_pod and result.failure is None:
            why = getattr(session, "why_no_pods", None)
            if why is not None:
                result.message = f"{where}: {why()}"
    if post_mortem:
        result.post_mortem = save_post_mortem(session, tracker.restarts, stalled)
    return result


def saved_result(namespace: str, name: str, directory: str | os.PathLike[str] | None = None) -> TrainResult:
    """`vpipe status --post-mortem`: the job as its saved post-mortem record under `directory`
    (default_directory() when None) tells it (the job itself may be gone); phase NotFound when
    there is no record."""
    from volcano_pipelines.postmortem.save import default_directory, load_post_mortem, record_paths

    loaded = load_post_mortem(namespace, name, directory)
    if loaded is None:
        json_path, _ = record_paths(namespace, name, directory)
        return TrainResult(name=name, namespace=namespace, run_id=None, phase="NotFound", succeeded=False,
                           message=f"no post-mortem record of job {namespace}/{name} ({json_path} does not exist or "
                                   f"is not a record; records are saved under {directory or default_directory()})")
    record, text = loaded
    job = record.get("job") or {}
    json_path, md_path = record_paths(namespace, name, directory)
    return TrainResult(name=name, namespace=namespace, run_id=None, phase=str(job.get("phase") or "Unknown"),
                       succeeded=job.get("phase") == "Completed", retries=int(job.get("retries") or 0),
                       message=job.get("message"), restarts=list(record.get("restarts") or []),
                       post_mortem={"json": str(json_path), "markdown": str(md_path), "bytes": record.get("bytes"),
                                    "pods": len(record.get("pods") or []), "summary": text, "record": record})
