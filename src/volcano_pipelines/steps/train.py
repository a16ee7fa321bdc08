"""The `train` step: build a Volcano Job for TensorFlow or MPI, submit it (or attach to the one
this run already submitted), wait for it to finish, and report what happened."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from volcano_pipelines.errors import InputError, WorkFailed
from volcano_pipelines.k8s import jobs
from volcano_pipelines.k8s.client import Cluster, connect
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import MPIJobSpec, TFJobSpec
from volcano_pipelines.volcano.status import (
    FAILED_PHASES,
    JobStatus,
    PodFailure,
    TaskCounts,
    counts_from_pods,
    final_counts,
    job_status,
    latest_counts,
    pod_failure,
    podgroup_name,
    podgroup_phase,
    scheduling_problem,
    scheduling_problem_from_events,
)
from volcano_pipelines.volcano.tf import build_tf_job
from volcano_pipelines.volcano.validate import check_positive_seconds

log = logging.getLogger(__name__)

ON_CANCEL_CHOICES = ("delete", "abort", "keep")
# While the gang waits, how often to ask the PodGroup why (one GET, whatever the job size).
HINT_INTERVAL_SECONDS = 5
# After an abort, how long to wait for Volcano to report the job Aborted.
ABORT_WAIT_SECONDS = 60
# A job still Pending this long after the scheduler admitted its PodGroup (Inqueue) has been
# missed by Volcano's job controller (seen after an API server restart: an informer re-list
# swallowed the phase change). A SyncJob Command makes the controller look again.
STUCK_INQUEUE_SECONDS = 30
RUN_ID_ENV = "VPIPE_RUN_ID"

ProgressCallback = Callable[[str, JobStatus, "str | None"], None]


@dataclass(frozen=True)
class RunOptions:
    kubeconfig: str | None = None
    context: str | None = None
    timeout_seconds: float | None = None  # None: wait as long as it takes
    on_cancel: str = "delete"  # what SIGTERM / Ctrl-C does to the job: delete | abort | keep
    dry_run: bool = False
    wait: bool = True
    log_lines: int = 20


@dataclass
class TrainResult:
    name: str
    namespace: str
    run_id: str | None
    phase: str
    succeeded: bool
    created: bool = False
    duration_seconds: float | None = None
    retries: int = 0
    tasks: dict[str, dict[str, int]] = field(default_factory=dict)
    failure: dict[str, Any] | None = None
    message: str | None = None
    manifest: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "run_id": self.run_id,
            "phase": self.phase,
            "succeeded": self.succeeded,
            "created": self.created,
            "duration_seconds": self.duration_seconds,
            "retries": self.retries,
            "tasks": self.tasks,
            "failure": self.failure,
            "message": self.message,
        }


class Cancelled(WorkFailed):
    """The step was asked to stop (SIGTERM from a cancelled pipeline, or Ctrl-C)."""


def default_run_id() -> str:
    """The pipeline's run identity when the caller gives none (a fresh one otherwise, so two
    unrelated runs never attach to each other's job)."""
    return os.environ.get(RUN_ID_ENV) or uuid.uuid4().hex[:16]


def render_tf(spec: TFJobSpec) -> dict[str, Any]:
    return build_tf_job(spec)


def render_mpi(spec: MPIJobSpec) -> dict[str, Any]:
    return build_mpi_job(spec)


def train_tf(spec: TFJobSpec, options: RunOptions = RunOptions(), progress: ProgressCallback | None = None) -> TrainResult:
    spec = replace(spec, job=replace(spec.job, run_id=spec.job.run_id or default_run_id()))
    return run_job(build_tf_job(spec), options, progress)


def train_mpi(spec: MPIJobSpec, options: RunOptions = RunOptions(), progress: ProgressCallback | None = None) -> TrainResult:
    spec = replace(spec, job=replace(spec.job, run_id=spec.job.run_id or default_run_id()))
    return run_job(build_mpi_job(spec), options, progress)


def validate_options(options: RunOptions) -> None:
    if options.timeout_seconds is not None:
        check_positive_seconds("timeout_seconds", options.timeout_seconds)
    if options.on_cancel not in ON_CANCEL_CHOICES:
        raise InputError("on_cancel", options.on_cancel, f"one of {', '.join(ON_CANCEL_CHOICES)}")


def run_job(manifest: dict[str, Any], options: RunOptions, progress: ProgressCallback | None = None) -> TrainResult:
    """Submit (or attach to) a rendered job and, unless told not to, wait for its end."""
    validate_options(options)
    meta = manifest["metadata"]
    run_id = meta["labels"].get(jobs.RUN_LABEL)
    if options.dry_run:
        return TrainResult(
            name=meta["name"], namespace=meta["namespace"], run_id=run_id, phase="DryRun", succeeded=True,
            message="dry run: nothing was created", manifest=manifest,
        )
    cluster = connect(options.kubeconfig, options.context)
    with _stop_signals():
        job, created = jobs.create_or_attach(cluster, manifest)
        log.info(
            "%s job %s/%s (run %s)", "created" if created else "attached to existing", meta["namespace"], meta["name"], run_id
        )
        if not options.wait:
            return _result(job, created=created, failure=None)
        try:
            return _wait(cluster, job, created, options, progress)
        except Cancelled as err:
            done = _cancel(cluster, job, options.on_cancel)
            raise WorkFailed(f"{err}; job {meta['namespace']}/{meta['name']} {done}") from None


def job_result(namespace: str, name: str, *, kubeconfig: str | None = None, context: str | None = None) -> TrainResult:
    """The current state of a job (for `vpipe status`)."""
    cluster = connect(kubeconfig, context)
    job = jobs.get_job(cluster, namespace, name)
    if job is None:
        return TrainResult(name=name, namespace=namespace, run_id=None, phase="NotFound", succeeded=False,
                           message=f"job {namespace}/{name} does not exist")
    status = job_status(job)
    failure = _failure(cluster, job, 20) if status.phase in FAILED_PHASES else None
    return _result(job, created=False, failure=failure)


def _wait(
    cluster: Cluster, job: dict[str, Any], created: bool, options: RunOptions, progress: ProgressCallback | None
) -> TrainResult:
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    started = time.monotonic()
    deadline = started + options.timeout_seconds if options.timeout_seconds else None
    last_hint = 0.0
    problem: str | None = None
    failures_logged = 0
    counts: dict[str, TaskCounts] = {}
    inqueue_since: float | None = None
    last_nudge = 0.0

    def window() -> int:
        base = HINT_INTERVAL_SECONDS if problem is not None or job_status(job).phase in ("Pending", "Inqueue") else jobs.WATCH_WINDOW_SECONDS
        if deadline is None:
            return base
        return int(max(1, min(base, deadline - time.monotonic() + 1)))

    watcher = jobs.FailedPodWatcher(cluster, namespace, name, options.log_lines)
    with watcher:
        finished = False
        for update in jobs.watch_job(cluster, namespace, name, window):
            if update is not None:
                job = update
            status = job_status(job)
            counts = latest_counts(counts, status.tasks)
            failed_pods = watcher.failed_pods()
            for pod in failed_pods[failures_logged:]:
                reported = pod_failure([pod])
                if reported is not None:
                    log.warning("job %s/%s: %s", namespace, name, reported.describe())
            failures_logged = len(failed_pods)
            if status.finished:
                finished = True
                break
            now = time.monotonic()
            if status.phase == "Pending" and now - last_hint >= HINT_INTERVAL_SECONDS:
                last_hint = now
                group_name = podgroup_name(job)
                group = jobs.get_podgroup(cluster, namespace, group_name)
                problem = (
                    scheduling_problem(group)
                    or scheduling_problem_from_events(jobs.job_events(cluster, namespace, group_name))
                    or problem
                )
                if podgroup_phase(group) == "Inqueue":
                    inqueue_since = inqueue_since or now
                    if now - inqueue_since >= STUCK_INQUEUE_SECONDS and now - last_nudge >= STUCK_INQUEUE_SECONDS:
                        log.warning("job %s/%s: still Pending %.0fs after its PodGroup was admitted; asking Volcano's "
                                    "job controller to sync it", namespace, name, now - inqueue_since)
                        jobs.send_command(cluster, job, "SyncJob", "PendingAfterInqueue")
                        last_nudge = now
                else:
                    inqueue_since = None
            elif status.phase != "Pending":
                problem = None
            if progress is not None:
                progress(name, status, problem)
            if deadline is not None and now >= deadline:
                return _timed_out(cluster, job, options, problem, progress)
        if not finished:
            return TrainResult(
                name=name, namespace=namespace, run_id=(meta.get("labels") or {}).get(jobs.RUN_LABEL), phase="Deleted",
                succeeded=False, created=created, message=f"job {namespace}/{name} was deleted before it finished",
            )
        # One pod list at the end, whatever the size: what remains, and who failed.
        pods = jobs.job_pods(cluster, namespace, name)
        failure = None
        if status.phase in FAILED_PHASES:
            failure = pod_failure(watcher.failed_pods() + pods)
            if failure is not None:
                tail = watcher.log_tail(failure.pod) or jobs.pod_log_tail(cluster, namespace, failure.pod, options.log_lines)
                failure = replace(failure, log_tail=tail)
    counts = final_counts(counts, counts_from_pods(pods))
    if progress is not None:
        progress(name, replace(status, tasks=counts), None)
    return _result(job, created=created, failure=failure, counts=counts)


def _timed_out(
    cluster: Cluster, job: dict[str, Any], options: RunOptions, problem: str | None, progress: ProgressCallback | None
) -> TrainResult:
    meta = job["metadata"]
    phase_then = job_status(job).phase
    done = jobs.abort_job(cluster, job)
    log.warning("job %s/%s: step timeout of %ss reached while %s; %s", meta["namespace"], meta["name"],
                options.timeout_seconds, phase_then, done)
    final = job
    if done == "aborted":
        give_up = time.monotonic() + ABORT_WAIT_SECONDS
        for update in jobs.watch_job(cluster, meta["namespace"], meta["name"], lambda: 5):
            if update is not None:
                final = update
            if job_status(final).phase in ("Aborted", "Completed", "Failed", "Terminated") or time.monotonic() > give_up:
                break
    result = _result(final, created=False, failure=None)
    result.succeeded = False
    result.message = (
        f"timed out after {options.timeout_seconds:g}s while the job was {phase_then}"
        + (f" ({problem})" if problem else "")
        + f"; job {done}"
    )
    if progress is not None:
        progress(meta["name"], job_status(final), None)
    return result


def _failure(cluster: Cluster, job: dict[str, Any], log_lines: int) -> PodFailure | None:
    meta = job["metadata"]
    failure = pod_failure(jobs.job_pods(cluster, meta["namespace"], meta["name"]))
    if failure is not None and log_lines > 0:
        failure = replace(failure, log_tail=jobs.pod_log_tail(cluster, meta["namespace"], failure.pod, log_lines))
    return failure


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _result(
    job: dict[str, Any],
    *,
    created: bool,
    failure: PodFailure | None,
    counts: dict[str, TaskCounts] | None = None,
) -> TrainResult:
    meta = job["metadata"]
    status = job_status(job)
    tasks = latest_counts(counts or {}, status.tasks)
    state = (job.get("status") or {}).get("state") or {}
    duration = _seconds_between(meta.get("creationTimestamp"), state.get("lastTransitionTime")) if status.finished else None
    message = None
    if status.phase in FAILED_PHASES:
        message = f"job {meta['namespace']}/{meta['name']} {status.phase}"
        if status.retries:
            message += f" after {status.retries} restart(s)"
        if failure is not None:
            message += f": {failure.describe()}"
        elif status.message:
            message += f": {status.message}"
    return TrainResult(
        name=meta["name"],
        namespace=meta["namespace"],
        run_id=(meta.get("labels") or {}).get(jobs.RUN_LABEL),
        phase=status.phase,
        succeeded=status.succeeded,
        created=created,
        duration_seconds=duration,
        retries=status.retries,
        tasks={task: task_counts.as_dict() for task, task_counts in tasks.items()},
        failure=failure.as_dict() if failure else None,
        message=message,
    )


def _cancel(cluster: Cluster, job: dict[str, Any], on_cancel: str) -> str:
    meta = job["metadata"]
    if on_cancel == "delete":
        jobs.delete_job(cluster, meta["namespace"], meta["name"])
        return "deleted"
    if on_cancel == "abort":
        return jobs.abort_job(cluster, job)
    return "kept"


@contextmanager
def _stop_signals() -> Iterator[None]:
    """Turn SIGTERM (a cancelled pipeline) and SIGINT into Cancelled so the job is cleaned up
    per --on-cancel; only possible from the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise Cancelled(f"cancelled by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
