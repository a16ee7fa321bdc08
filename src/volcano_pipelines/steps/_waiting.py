"""The wait policy, written once against the backend protocol: submit or attach, follow the
job to its end, show why it waits, nudge a job Volcano's controller missed, enforce the step
timeout (abort), and clean up on SIGTERM / Ctrl-C per `on_cancel`. Time comes from an
injectable clock, so every behaviour is unit-tested without sleeping."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from volcano_pipelines.backends.base import ON_CANCEL_CHOICES, Backend, Job, JobSession, Pod
from volcano_pipelines.deadline import Deadline
from volcano_pipelines.errors import ClusterError
from volcano_pipelines.k8s.errors import Forbidden
from volcano_pipelines.labels import RUN_LABEL
from volcano_pipelines.progress import Progress
from volcano_pipelines.steps._stop_signals import Cancelled, StopSignal, hurry_on_signal, stop_signals
from volcano_pipelines.steps._follow import FollowPolicy, Follower, fill_result, result_from_annotations
from volcano_pipelines.steps._restarts import RestartTracker, finish_result, save_post_mortem
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.volcano.completion import GRACE_SECONDS as COMPLETION_GRACE_SECONDS
from volcano_pipelines.volcano.completion import CompletionWatch, completion_met, controller_stuck_message, last_success_at
from volcano_pipelines.volcano.stalls import ON_STALL_FAIL, ON_STALL_RESTART, Stall
from volcano_pipelines.volcano.summary import JobSummary, abnormal_pods
from volcano_pipelines.volcano.status import (
    FAILED_PHASES,
    FINAL_PHASES,
    PodFailure,
    TaskCounts,
    counts_from_pods,
    counts_of_finished_job,
    final_counts,
    job_status,
    latest_counts,
    pod_failure,
)

__all__ = ["ON_CANCEL_CHOICES", "Cancelled", "PodDeleted", "StopSignal", "WaitPolicy", "job_result", "run"]

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class WaitPolicy:
    timeout_seconds: float | None = None  # None: wait as long as it takes
    on_cancel: str = "delete"  # what SIGTERM / Ctrl-C does to the job: delete | abort | keep
    # What SIGTERM does when the step's own pod is being deleted (a lost pod that a retry will
    # replace, e.g. Argo's retryStrategy on Error nodes); None: as on_cancel.
    on_pod_deleted: str | None = None
    wait: bool = True
    log_lines: int = 20
    # How long one watch request may stay open once the job runs (each return is a chance to
    # look at the deadline).
    watch_window_seconds: float = 20
    # While the gang waits, how often to ask why (one read, whatever the job size).
    hint_interval_seconds: float = 5
    # After an abort, how long to wait for the backend to report the job Aborted.
    abort_wait_seconds: float = 60
    # A job still Pending this long after its gang was admitted (Volcano: PodGroup Inqueue)
    # was missed by the job controller (seen after an API server restart: an informer
    # re-list swallowed the phase change); a nudge makes it look again.
    stuck_admitted_seconds: float = 30
    # A Running job whose completion condition has held this long without Volcano completing
    # it: the controller is behind or cannot act (volcano/completion.py); shown as the problem.
    controller_grace_seconds: float = 60
    # Following the training's progress reports (steps/_follow.py, docs/progress.md).
    follow: FollowPolicy = FollowPolicy()
    # What a stalled task (follow.stall_timeout_seconds) does: warn | fail | restart.
    on_stall: str = "warn"


class PodDeleted(ClusterError):
    """SIGTERM came because the step's own pod is being deleted (evicted, drained, deleted by
    hand): not the work's failure but the platform's (exit 3), and a retry re-attaches."""


def run(
    backend: Backend,
    manifest: Job,
    policy: WaitPolicy,
    progress: Progress | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    handle_signals: bool = True,
) -> TrainResult:
    """Submit (or attach to) a rendered job and, unless told not to, wait for its end."""
    progress = progress or Progress()
    meta = manifest["metadata"]
    with stop_signals(handle_signals):
        # The step's timeout counts from here: a slow submission (a silent API server) uses it up.
        started = clock()
        job, created = backend.submit(manifest)
        log.info("%s job %s/%s (run %s) on the %s backend", "created" if created else "attached to existing",
                 meta["namespace"], meta["name"], meta["labels"].get(RUN_LABEL), backend.name)
        if not policy.wait:
            return _result(job, created=created, backend=backend.name)
        with backend.session(job, policy.log_lines) as session:
            waiter = _Waiter(session, job, created, policy, progress, clock, backend.name, started)
            try:
                return waiter.wait()
            except StopSignal as err:
                pod_deleted = _own_pod_deleted(backend, policy)
                action = policy.on_pod_deleted if pod_deleted and policy.on_pod_deleted else policy.on_cancel
                # The display says so at once: the stop may take the tasks' grace period.
                stopping = f"{err}: stopping the job (on_cancel={action})"
                progress.job(meta["name"], job_status(waiter.job), stopping)
                if action != "keep":  # the record first: deleting or aborting the job deletes its pods
                    save_post_mortem(session, list(waiter.tracker.restarts), cancelled=stopping)
                with hurry_on_signal(session, progress, handle_signals):
                    done = _cancel(session, action)
                if pod_deleted:
                    # Exit 3, not 1: the step did not fail, its pod was taken away (a retry attaches).
                    raise PodDeleted(f"{err} while this step's pod was being deleted; job {meta['namespace']}/"
                                     f"{meta['name']} {done} (on_pod_deleted={action})") from None
                raise Cancelled(f"{err}; job {meta['namespace']}/{meta['name']} {done}") from None


def job_result(backend: Backend, namespace: str, name: str, log_lines: int = 20) -> TrainResult:
    """The current state of a job (for `vpipe status`)."""
    job = backend.get(namespace, name)
    if job is None:
        return TrainResult(name=name, namespace=namespace, run_id=None, phase="NotFound", succeeded=False,
                           backend=backend.name, message=f"job {namespace}/{name} does not exist")
    phase = job_status(job).phase
    with backend.session(job, log_lines, watch_pods=False) as session:
        # One pod list, whatever the job's size: which pods are not as they should be (a job
        # that failed needs it for its failure; otherwise a refused list only shows less).
        try:
            pods = session.pods()
        except Forbidden:
            if phase in FAILED_PHASES:
                raise
            pods = []
        failure = pod_failure(pods) if phase in FAILED_PHASES else None
        if failure is not None and log_lines > 0:
            failure = replace(failure, log_tail=session.log_tail(failure.pod, log_lines))
        stuck = _controller_stuck(job, pods, session)
        missing = session.missing()
    # Volcano clears a finished job's counts as it deletes its pods: count what remains.
    counts = counts_of_finished_job(job, phase, pods) if phase in FINAL_PHASES else None
    result = _result(job, created=False, backend=backend.name, failure=failure, counts=counts, missing=missing)
    result.abnormal = abnormal_pods(pods, phase, job)
    result.message = result.message or stuck
    return result_from_annotations(result, job)


def _controller_stuck(job: Job, pods: list[Pod], session: JobSession, now: float | None = None) -> str | None:
    """For `vpipe status` (one look, no watch): the job still Running a minute after the pods
    that complete it ended, said as the waiting step says it, with the controller's newest
    warning (one events list, only then)."""
    met = completion_met(job)
    ended = last_success_at(pods) if met is not None else None
    if met is None or ended is None:
        return None
    seconds = (time.time() if now is None else now) - ended
    if seconds < COMPLETION_GRACE_SECONDS:
        return None
    return controller_stuck_message(met, seconds, session.controller_warning())


class _Waiter:
    """One wait: the loop's state lives here so each decision is a small method."""

    def __init__(self, session: JobSession, job: Job, created: bool, policy: WaitPolicy, progress: Progress,
                 clock: Callable[[], float], backend: str, started: float | None = None) -> None:
        self.session = session
        self.job = job
        self.created = created
        self.policy = policy
        self.progress = progress
        self.clock = clock
        self.backend = backend
        meta = job["metadata"]
        self.namespace, self.name = meta["namespace"], meta["name"]
        self.deadline = Deadline.after(policy.timeout_seconds or None, clock, start=started)
        self.problem: str | None = None
        self.counts: dict[str, TaskCounts] = {}
        self.last_hint: float | None = None
        self.admitted_since: float | None = None
        self.admitted_pods: object = None  # the job's pod counts when admitted_since was set
        self.last_nudge: float | None = None
        self.completion = CompletionWatch(grace_seconds=policy.controller_grace_seconds)
        self.follower = Follower(session, job, progress, clock, policy.follow)
        self.tracker = RestartTracker(self.namespace, self.name, progress, clock)

    def window(self) -> float:
        """How long the next watch request may stay open: short while waiting for the gang
        (hints) and never past the deadline."""
        waiting = job_status(self.job).phase in ("Pending", "Inqueue")
        base = self.policy.hint_interval_seconds if waiting else self.policy.watch_window_seconds
        follow = self.follower.seconds_to_next_read(self.clock())
        base = base if follow is None else max(1.0, min(base, follow))
        if not self.deadline.limited:
            return base
        return max(1.0, min(base, self.deadline.remaining() + 1))

    def wait(self) -> TrainResult:
        status = job_status(self.job)
        finished = status.finished
        if not finished:
            for update in self.session.watch(self.window):
                if update is not None:
                    self.job = update
                status = job_status(self.job)
                self.counts = latest_counts(self.counts, status.tasks)
                failed = self._log_new_failures()
                if status.finished:
                    finished = True
                    break
                now = self.clock()
                if status.phase == "Pending":
                    self._pending_hints(now)
                    # A gang still starting whose chief already succeeded: the controller is
                    # behind (its queue of the job's pod events), whatever the scheduler says.
                    self.problem = self.completion.problem(now, self.job, self.session.controller_warning) or self.problem
                else:
                    # A later Pending (a restart) is a new wait: not stuck since the first one.
                    # Running: whether the controller completes the job once it should.
                    self.problem = self.completion.problem(now, self.job, self.session.controller_warning)
                    self.admitted_since = None
                self.progress.job(self.name, status, self.problem)
                stall = self.follower.stall
                self.progress.summary(JobSummary.of(self.name, status, self.problem, restarts=self.tracker.restarts,
                                                    abnormal=abnormal_pods(failed, status.phase, self.job),
                                                    stalled=((stall.tasks, stall.oldest_seconds),) if stall else ()))
                self.follower.poll(now, status)
                if (stall := self.follower.take_new_stall()) is not None and self.policy.on_stall != "warn":
                    if self.policy.on_stall == ON_STALL_FAIL:
                        return self._give_up("TasksStalled", f"stalled: {stall.describe()}", on_stall=ON_STALL_FAIL)
                    self._restart_for(stall)
                if self.deadline.expired(now):
                    return self._timed_out()
        if not finished:
            return TrainResult(
                name=self.name, namespace=self.namespace, run_id=_run_id(self.job), phase="Deleted", succeeded=False,
                created=self.created, backend=self.backend, missing=self.session.missing(),
                message=f"job {self.namespace}/{self.name} was deleted before it finished",
            )
        # One pod list at the end, whatever the size: what remains, and who failed.
        pods = self.session.pods()
        failure = None
        if status.phase in FAILED_PHASES:
            failure = pod_failure(self.session.failed_pods() + pods)
            if failure is not None and self.policy.log_lines > 0:
                failure = replace(failure, log_tail=self.session.log_tail(failure.pod, self.policy.log_lines))
        counts = final_counts(self.counts, counts_from_pods(pods))
        # The training's last figures before the final phase: nothing is shown after "Completed".
        reported = self.follower.finish(completed=status.phase == "Completed")
        self.progress.job(self.name, replace(status, tasks=counts), None)
        result = _result(self.job, created=self.created, backend=self.backend, failure=failure, counts=counts,
                         missing=self.session.missing(), linger=self.session.linger_seconds())
        result.abnormal = abnormal_pods(pods, status.phase, self.job)
        result.stalled = self.follower.stall_dict()
        return fill_result(finish_result(result, self.job, self.session, self.tracker, log_lines=self.policy.log_lines,
                                         stalled=result.stalled), reported)

    def _log_new_failures(self) -> list[dict[str, Any]]:
        # Named by cause as they happen; pods the job's own policy stops are no failures.
        failed = self.session.failed_pods()
        self.tracker.observe(self.job, failed)
        return failed

    def _pending_hints(self, now: float) -> None:
        if self.last_hint is not None and now - self.last_hint < self.policy.hint_interval_seconds:
            return
        self.last_hint = now
        hint = self.session.scheduling()
        self.problem = hint.problem or self.problem
        if not hint.admitted:
            self.admitted_since = None
            return
        # Volcano is at work while the job's pods still appear or change (creating a gang of
        # thousands takes minutes): stuck counts from the last change, not from the admission.
        pods = sorted((task, counts) for task, counts in job_status(self.job).tasks.items())
        if self.admitted_since is None or pods != self.admitted_pods:
            self.admitted_since, self.admitted_pods = now, pods
        stuck = now - self.admitted_since >= self.policy.stuck_admitted_seconds
        recently = self.last_nudge is not None and now - self.last_nudge < self.policy.stuck_admitted_seconds
        if stuck and not recently:
            log.warning("job %s/%s: still Pending %.0fs after its gang was admitted; asking the controller to "
                        "sync it", self.namespace, self.name, now - self.admitted_since)
            self.session.nudge()
            self.last_nudge = now

    def _restart_for(self, stall: Stall) -> None:
        """--on-stall restart: Volcano's RestartJob Command (what `vcctl job restart` sends),
        counted like any restart, its cause the stalled tasks."""
        self.follower.acted(ON_STALL_RESTART)
        self.tracker.expect({"cause": "stalled", "task": stall.tasks, "message": stall.describe()},
                            f"stalled: {stall.describe()}")
        self.progress.note(f"job {self.name}: restarting the job (on_stall=restart)")
        self.session.restart("TasksStalled")

    def _timed_out(self) -> TrainResult:
        return self._give_up("StepTimeout", f"timed out after {self.policy.timeout_seconds:g}s")

    def _give_up(self, reason: str, why: str, on_stall: str | None = None) -> TrainResult:
        """A timeout, or a stall with --on-stall fail: the record first (the abort deletes the
        pods), then the job aborted and the step failed."""
        if on_stall is not None:
            self.follower.acted(on_stall)
        phase_then = job_status(self.job).phase
        saved = save_post_mortem(self.session, self.tracker.restarts, stalled=self.follower.stall_dict())
        done = self.session.abort(reason)
        log.warning("job %s/%s: %s while %s; %s", self.namespace, self.name, why, phase_then, done)
        final = self.job
        if done == "aborted":
            give_up = self.clock() + self.policy.abort_wait_seconds
            for update in self.session.watch(lambda: 5):
                if update is not None:
                    final = update
                if job_status(final).phase in FINAL_PHASES or self.clock() > give_up:
                    break
        result = _result(final, created=self.created, backend=self.backend, missing=self.session.missing())
        # The step failed even if the job happened to complete while it was being aborted:
        # a timeout is the step's verdict, and what it ran may be incomplete.
        result.succeeded = False
        result.message = (f"{why} while the job was {phase_then}" + (f" ({self.problem})" if self.problem else "")
                          + f"; job {done}" + (f" (on_stall={on_stall})" if on_stall else ""))
        self.progress.job(self.name, job_status(final), None)
        self.tracker.finish()
        result.restarts, result.post_mortem = list(self.tracker.restarts), saved
        result.stalled = self.follower.stall_dict()
        return fill_result(result, self.follower.state)


def _own_pod_deleted(backend: Backend, policy: WaitPolicy) -> bool:
    """Whether the cancel came because the step's own pod is being deleted (asked only when
    on_pod_deleted is set, of a backend that can tell)."""
    if policy.on_pod_deleted is None:
        return False
    own_pod_deleted = getattr(backend, "own_pod_deleted", None)
    return bool(own_pod_deleted is not None and own_pod_deleted())


def _cancel(session: JobSession, on_cancel: str) -> str:
    if on_cancel == "delete":
        session.delete()
        return "deleted"
    if on_cancel == "abort":
        return session.abort("StepCancelled")
    return "kept"


def _run_id(job: Job) -> str | None:
    return ((job.get("metadata") or {}).get("labels") or {}).get(RUN_LABEL)


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()


def completing_seconds(job: Job) -> float | None:
    """How long a Completed job was Completing, from Volcano's own phase transitions
    (status.conditions, one per phase): the completion task had ended (CompleteJob) and the
    remaining pods, the parameter servers, were being ended. None without both times."""
    times = {c.get("status"): c.get("lastTransitionTime") for c in (job.get("status") or {}).get("conditions") or []
             if isinstance(c, dict)}
    seconds = _seconds_between(times.get("Completing"), times.get("Completed"))
    return None if seconds is None or seconds < 0 else seconds


def _result(
    job: Job,
    *,
    created: bool,
    backend: str,
    failure: PodFailure | None = None,
    counts: dict[str, TaskCounts] | None = None,
    missing: list[str] | None = None,
    linger: float | None = None,
) -> TrainResult:
    meta = job["metadata"]
    status = job_status(job)
    tasks = latest_counts(counts or {}, status.tasks)
    state: dict[str, Any] = (job.get("status") or {}).get("state") or {}
    duration = _seconds_between(meta.get("creationTimestamp"), state.get("lastTransitionTime")) if status.finished else None
    if linger is None and status.phase == "Completed":
        linger = completing_seconds(job)
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
        run_id=_run_id(job),
        phase=status.phase,
        succeeded=status.succeeded,
        created=created,
        backend=backend,
        duration_seconds=duration,
        retries=status.retries,
        tasks={task: task_counts.to_dict() for task, task_counts in tasks.items()},
        failure=failure.to_dict() if failure else None,
        message=message,
        ps_linger_seconds=linger,
        missing=list(missing or []),
    )
