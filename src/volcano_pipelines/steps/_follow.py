"""Following a job's training progress while the step waits (docs/progress.md): every
`interval_seconds`, the tail of one pod's log (the chief / MPI master / worker 0, see
`report_lines.reporting_pod`) is read and parsed; what changed is shown through the Progress
interface and, at a bounded rate, written as annotations on the Job. The cost is one log read
per interval and at most one patch per `annotate_interval_seconds`, whatever the job's size.

Nothing here may fail the step: a log that cannot be read, a patch refused, a job whose code
reports nothing only mean less to show (the session records a refused permission)."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.backends.base import Job, JobSession
from volcano_pipelines.progress import Progress
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.volcano.report_lines import (
    ProgressTracker,
    TrainingProgress,
    annotations_patch,
    parse_text,
    progress_from_annotations,
    reporting_pod,
)
from volcano_pipelines.volcano.stalls import (
    STALLED_ANNOTATION,
    Stall,
    StallReport,
    merge_ranges,
    parse_stalled,
    stall_from_annotations,
)
from volcano_pipelines.volcano.status import JobStatus

__all__ = ["FollowPolicy", "Follower", "fill_result", "result_from_annotations"]

log = logging.getLogger(__name__)

# Phases in which the reporting pod may be writing (Restarting: the old pod's last lines).
_FOLLOWED_PHASES = frozenset({"Running", "Restarting", "Completing", "Terminating", "Aborting"})


@dataclass(frozen=True)
class FollowPolicy:
    enabled: bool = True
    # How often the reporting pod's log tail is read.
    interval_seconds: float = 15.0
    # How many lines of it: enough to hold the latest report of each kind between two reads.
    tail_lines: int = 200
    # The Job's annotations are patched when they changed, at most this often.
    annotate_interval_seconds: float = 30.0
    # A task without progress (or, for one that makes no steps, without a heartbeat) this long
    # is stalled (docs/progress.md "Hung tasks"); 0: no stall detection.
    stall_timeout_seconds: float = 0.0

    @classmethod
    def every(cls, progress_interval: float, stall_timeout: float = 0.0) -> FollowPolicy:
        """The policy for `--progress-interval`: 0 follows nothing; the annotations are patched
        at most every other read and never more often than every 10 s (30 s by default), so a
        user asking for frequent reads sees the Job move too while the API server's load stays
        one small patch per job per 10 s at worst."""
        if progress_interval <= 0:
            return cls(enabled=False)
        return cls(interval_seconds=progress_interval,
                   annotate_interval_seconds=max(10.0, 2 * progress_interval), stall_timeout_seconds=stall_timeout)


class Follower:
    def __init__(self, session: JobSession, job: Job, progress: Progress, clock: Callable[[], float],
                 policy: FollowPolicy | None = None, *, wall: Callable[[], float] = time.time) -> None:
        self.session = session
        self.progress = progress
        self.clock = clock
        self.wall = wall
        self.policy = policy or FollowPolicy()
        self.name: str = job["metadata"]["name"]
        self.pod = reporting_pod(job) if self.policy.enabled else None
        self.tracker = ProgressTracker()
        self.last_read: float | None = None
        self.last_annotated: float | None = None
        self.annotated: dict[str, str] = {}
        self.retries: int | None = None
        self.following = False  # the job is in a phase whose pods may be writing reports
        self.reads = 0
        self.patches = 0
        # Hung tasks: the coordinator's latest `vpipe:stalled` line, when the reporting task's
        # step last changed (this step's clock), and what the step concludes.
        self.stall_report: StallReport | None = None
        self.before_restart: StallReport | None = None
        self.step_changed_at: float | None = None
        self.last_progress: tuple[int, float | None] | None = None  # (step, time) of the latest progress line
        self.attempt_started: float = wall()  # reports older than this attempt are not taken
        self.running = False
        self.stall: Stall | None = None  # the tasks stalled now
        self.last_stall: Stall | None = None  # the latest stall seen (for the result), cleared or not
        self.cleared: float | None = None
        self.new_stall = False  # set when the stalled set changed to a non-empty one; see take_new_stall

    @property
    def state(self) -> TrainingProgress:
        return self.tracker.state

    def seconds_to_next_read(self, now: float) -> float | None:
        """For the wait's watch window: when the next read is due (None: not following)."""
        if self.pod is None or not self.following:
            return None
        if self.last_read is None:
            return 0.0
        return max(0.0, self.last_read + self.policy.interval_seconds - now)

    def poll(self, now: float, status: JobStatus) -> None:
        """Called on every turn of the wait loop; reads only when a read is due."""
        if self.pod is None:
            return
        if self.retries is not None and status.retries > self.retries:
            # A new attempt: its pods start again (their first lines say where from), and none
            # of them has beaten or progressed yet.
            self.tracker.restarted()
            # The old pod's last lines may be read again while it restarts: its report is not news.
            self.before_restart = self.stall_report
            self.stall_report, self.step_changed_at, self.attempt_started = None, None, self.wall()
            self._judge(now)
        self.retries = status.retries
        self.running = status.phase == "Running"
        self.following = status.phase in _FOLLOWED_PHASES
        if not self.following:
            return
        if self.last_read is not None and now - self.last_read < self.policy.interval_seconds:
            self._annotate(now, force=False)
            return
        self._read(now)

    def finish(self, completed: bool = False) -> TrainingProgress:
        """The job ended: one last read (the final reports) and the annotations brought up to
        date; a stall still open when the job `completed` is over (its tasks finished: the
        wait's last turn can come before the read that sees a stopped task run again). Returns
        what was reported."""
        if self.pod is not None:
            self._read(self.clock(), final=True)
            if completed and self.stall is not None:
                self.cleared = self.wall()
                self.progress.note(f"job {self.name}: no task stalled any more (the job completed)")
                self.stall = None
            self._annotate(self.clock(), force=True)
            if not self.state.reported:
                self.progress.note(f"job {self.name}: no progress reported")
        return self.state

    def _read(self, now: float, final: bool = False) -> None:
        assert self.pod is not None
        self.last_read = now
        self.reads += 1
        text = _tail(self.session, self.pod, self.policy.tail_lines)
        reports = parse_text(text)
        if self.tracker.observe(reports, self.wall()):
            self.progress.training(self.name, self.state)
        # A new progress report (an old line read again is not one; nor a `resumed` line: a
        # restarted run that has not stepped yet is still starting up).
        last = next(((r.step, r.time) for r in reversed(reports) if r.kind == "progress"), None)
        if last is not None and last != self.last_progress:
            self.last_progress, self.step_changed_at = last, now
        report = parse_stalled(text)
        if report is not None and report != self.before_restart and \
                (report.time is None or report.time >= int(self.attempt_started)):
            self.stall_report = report
        if not final:
            self._judge(now)
            self._annotate(now, force=False)

    # --- hung tasks

    def acted(self, action: str) -> None:
        """What --on-stall did about the current stall (the result and annotation say it)."""
        if self.stall is not None:
            self.stall = self.last_stall = dataclasses.replace(self.stall, action=action)

    def take_new_stall(self) -> Stall | None:
        """The stall found since the last call (None: nothing new)."""
        if not self.new_stall:
            return None
        self.new_stall = False
        return self.stall

    def _judge(self, now: float) -> None:
        """Which tasks are stalled now: those the coordinator names, and the reporting task
        itself when its reports stopped moving while the job runs (a coordinator stopped as a
        whole cannot name anyone, itself included). Never before the first report."""
        timeout = self.policy.stall_timeout_seconds
        if timeout <= 0:
            return
        named, silent, oldest = "", "", 0.0
        report = self.stall_report
        if report is not None and report.count > 0:
            named, silent = report.tasks, report.silent
            oldest = (report.oldest_seconds or 0.0) + max(0.0, self.wall() - report.time if report.time else 0.0)
        trained = self.state.total is not None and (self.state.step or 0) >= self.state.total  # exporting
        if self.running and self.step_changed_at is not None and now - self.step_changed_at > timeout \
                and self.pod is not None and not trained:
            # `<job>-chief-0` -> chief[0]
            task = self.pod[len(self.name) + 1:].rsplit("-", 1)[0]
            named = merge_ranges(named, f"{task}[0]")
            oldest = max(oldest, now - self.step_changed_at)
        if not named:
            if self.stall is not None:
                self.cleared = self.wall()
                self.progress.note(f"job {self.name}: no task stalled any more")
                self.stall = None
            return
        # One episode from the first stalled task until none is: the tasks named in it add up
        # (a stopped worker that runs again may be seen before the coordinator waiting on it).
        before = self.stall
        if before is None:
            self.stall = Stall(named, silent, oldest, self.wall(), "warn")
        else:
            self.stall = Stall(merge_ranges(before.tasks, named), merge_ranges(before.silent, silent),
                               max(oldest, before.oldest_seconds), before.since, before.action)
        if before is None or self.stall.tasks != before.tasks:
            self.new_stall = self.new_stall or before is None  # --on-stall acts once per episode
            self.cleared = None
            # Said once: Progress.warn logs it where there is no display, else shows it above it.
            self.progress.warn(f"job {self.name}: stalled: {self.stall.describe()}")
        self.last_stall = self.stall

    def stall_dict(self) -> dict[str, Any] | None:
        """The result's `stalled`: the latest stall seen, with `cleared` when it ended."""
        if self.last_stall is None:
            return None
        out = self.last_stall.to_dict()
        if self.stall is None and self.cleared is not None:
            out["cleared"] = Stall("", "", 0, self.cleared, "").to_dict()["since"]
        return out

    def _annotate(self, now: float, *, force: bool) -> None:
        wanted = annotations_patch(self.state)
        stalled = self.stall_dict()
        if stalled is not None:
            wanted[STALLED_ANNOTATION] = json.dumps(stalled, sort_keys=True, separators=(",", ":"))
        if not wanted or wanted == self.annotated:
            return
        if not force and self.last_annotated is not None and \
                now - self.last_annotated < self.policy.annotate_interval_seconds:
            return
        annotate = getattr(self.session, "annotate", None)
        if annotate is None:
            return
        self.last_annotated = now
        changed = {key: value for key, value in wanted.items() if self.annotated.get(key) != value}
        try:
            annotate(changed)
        except Exception as err:  # noqa: BLE001 - the annotations are for people and schedulers, never the verdict
            log.debug("cannot annotate job %s: %s", self.name, err)
            return
        self.patches += 1
        self.annotated = wanted


def _tail(session: JobSession, pod: str, lines: int) -> str | None:
    """The last lines of the pod's current log: a backend's own progress read where it has one
    (the cluster: no cache of a failed pod's log), else its log tail."""
    reader = getattr(session, "progress_log", None)
    try:
        if reader is not None:
            text: str | None = reader(pod, lines)
        else:
            text = session.log_tail(pod, lines)
    except Exception as err:  # noqa: BLE001 - a missed read only delays the next report
        log.debug("cannot read the log of %s: %s", pod, err)
        return None
    return text


def fill_result(result: TrainResult, state: TrainingProgress) -> TrainResult:
    """The final figures on the step's result."""
    result.progress = state.progress_dict()
    result.last_checkpoint = state.checkpoint_dict()
    result.resumed_from_step = state.resumed_from_step
    return result


def result_from_annotations(result: TrainResult, job: dict[str, Any] | None) -> TrainResult:
    """`vpipe status`: the figures the waiting step last wrote on the job."""
    annotations = ((job or {}).get("metadata") or {}).get("annotations")
    result.stalled = stall_from_annotations(annotations)
    return fill_result(result, progress_from_annotations(annotations))
