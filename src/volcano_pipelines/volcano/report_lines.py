"""The progress protocol: lines that training code prints to stdout or stderr, read back from
the tail of one pod's log by the train step while it waits. Pure: text in, reports out;
garbage (any other line, a half-written line, a value that is not a number) is ignored.

The format (docs/progress.md), one report per line, the marker anywhere in the line so a
logger's prefix does not matter, then `key=value` pairs separated by spaces (a value with
spaces in double quotes); unknown keys are ignored, so the format can grow:

    vpipe:progress step=1200 total=6000 loss=0.431 examples_per_second=812.5
    vpipe:checkpoint step=1200 path=/logs/run/checkpoints/ckpt-1200
    vpipe:resumed step=1200 path=/logs/run/checkpoints/ckpt-1200

`step` is required (a non-negative integer) in every report; `total`, `loss`,
`examples_per_second`, `path` are optional; `time` (Unix seconds) optionally says when it
happened (else the reader uses the time it first saw the line, and measures the rate only from
the newest line of each read).

The same module holds what the step makes of the reports over time (`ProgressTracker`: the
latest progress, the rate and the ETA, the last checkpoint, the step a restarted run resumed
from) and the Job annotations that publish it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "CHECKPOINT_ANNOTATION",
    "KINDS",
    "PROGRESS_ANNOTATION",
    "Report",
    "ProgressTracker",
    "TrainingProgress",
    "annotations_patch",
    "parse_line",
    "parse_text",
    "reporting_pod",
    "progress_from_annotations",
    "progress_from_dicts",
]

MARKER = "vpipe:"
KINDS = ("progress", "checkpoint", "resumed")
# Job annotations the step keeps current while it waits (JSON values, docs/progress.md).
PROGRESS_ANNOTATION = "volcano-pipelines/progress"
CHECKPOINT_ANNOTATION = "volcano-pipelines/last-checkpoint"
# A longer line is not one of ours (or is a binary blob): not worth a regex.
MAX_LINE = 4096
MAX_PATH = 1024

_REPORT = re.compile(r"vpipe:(progress|checkpoint|resumed)(?:\s|$)")
_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S*)')


@dataclass(frozen=True)
class Report:
    kind: str  # progress | checkpoint | resumed
    step: int
    total: int | None = None
    loss: float | None = None
    examples_per_second: float | None = None
    path: str | None = None
    time: float | None = None  # Unix seconds, when the line says


def _int(value: str | None) -> int | None:
    if value is None or not re.fullmatch(r"\d{1,18}", value):
        return None
    return int(value)


def _float(value: str | None) -> float | None:
    if value is None or len(value) > 40:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def parse_line(line: str) -> Report | None:
    """The report on one line, or None when it holds none (or a broken one)."""
    if len(line) > MAX_LINE or MARKER not in line:
        return None
    match = _REPORT.search(line)
    if match is None:
        return None
    pairs: dict[str, str] = {}
    for key, value in _PAIR.findall(line[match.end():]):
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        pairs.setdefault(key, value)
    step = _int(pairs.get("step"))
    if step is None:
        return None
    total = _int(pairs.get("total"))
    path = pairs.get("path") or None
    when = _float(pairs.get("time"))
    rate = _float(pairs.get("examples_per_second"))
    return Report(
        kind=match.group(1),
        step=step,
        total=total if total else None,
        loss=_float(pairs.get("loss")),
        examples_per_second=rate if rate is not None and rate >= 0 else None,
        path=path[:MAX_PATH] if path else None,
        time=when if when is not None and when > 0 else None,
    )


def parse_text(text: str | None) -> list[Report]:
    """Every report in a block of log text, in order."""
    if not text or MARKER not in text:
        return []
    return [report for line in text.splitlines() if (report := parse_line(line)) is not None]


@dataclass(frozen=True)
class TrainingProgress:
    """What the step knows of a job's training right now (every field may be missing)."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None
    examples_per_second: float | None = None
    steps_per_second: float | None = None
    eta_seconds: float | None = None
    updated: float | None = None  # Unix seconds of the latest progress report
    checkpoint_step: int | None = None
    checkpoint_path: str | None = None
    checkpoint_time: float | None = None
    resumed_from_step: int | None = None

    @property
    def reported(self) -> bool:
        return self.step is not None or self.checkpoint_step is not None

    @property
    def fraction(self) -> float | None:
        if self.step is None or not self.total:
            return None
        return min(1.0, self.step / self.total)

    def progress_dict(self) -> dict[str, Any] | None:
        """The numbers (the result's `progress`, the progress annotation); None before the
        first progress report."""
        if self.step is None:
            return None
        out: dict[str, Any] = {"step": self.step, "total": self.total, "loss": self.loss,
                               "examples_per_second": _round(self.examples_per_second),
                               "steps_per_second": _round(self.steps_per_second),
                               "eta_seconds": _round(self.eta_seconds, 0),
                               "updated": _iso(self.updated)}
        return {key: value for key, value in out.items() if value is not None}

    def checkpoint_dict(self) -> dict[str, Any] | None:
        if self.checkpoint_step is None:
            return None
        out: dict[str, Any] = {"step": self.checkpoint_step, "time": _iso(self.checkpoint_time),
                               "path": self.checkpoint_path}
        return {key: value for key, value in out.items() if value is not None}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _from_iso(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_KEEP_RESUMES = 32  # one per restart; bounded against code that prints many
# The rate (and so the ETA) is measured over the reports of the last minute of the current
# attempt: long enough to smooth a block of steps, short enough to follow a change of pace (a
# slow start, workers joining); at most this many samples are kept.
RATE_WINDOW_SECONDS = 60.0
_MAX_SAMPLES = 64


@dataclass
class ProgressTracker:
    """The reports of one job, as they are read again and again from overlapping log tails:
    the same line read twice changes nothing. `observe` takes the reports of one read and the
    time of the read (Unix seconds); `restarted` marks a new attempt of the job (a restart:
    the rate starts again and the next report tells the step it resumed from).

    The rate comes from when the reports were printed: a line's own `time=`, else, for the
    newest report of a read only, the time of the read (the older lines of a tail were printed
    before it, at times unknown: taking the read's time for them made the first reads of an
    attempt look like a burst of steps, and the ETA too low)."""

    # (time, step) of the current attempt's progress reports inside the rate window, oldest first.
    _samples: list[tuple[float, int]] = field(default_factory=list)
    _seen: dict[tuple[str, int], float] = field(default_factory=dict)
    state: TrainingProgress = field(default_factory=TrainingProgress)
    _new_attempt: bool = False
    # A new attempt's first checkpoint is taken even when lower than the last one shown (code
    # that does not resume starts again from 0), whatever the order of its first lines.
    _new_checkpoints: bool = False
    # (step, time) of the resume lines already taken, so a re-read never moves the step back.
    _resumes: list[tuple[int, float | None]] = field(default_factory=list)
    # A new attempt may print the very resume line the last one printed (same step, no time):
    # it is taken once more, unless the read is the old attempt's log read again (its newest
    # report is the one last taken before the restart).
    _resume_again: bool = False
    _last_taken: Report | None = None
    _replay_end: Report | None = None

    def restarted(self) -> None:
        self._samples = []
        self._new_attempt = True
        self._new_checkpoints = True
        self._resume_again = True
        self._replay_end = self._last_taken

    def observe(self, reports: Iterable[Report], now: float) -> bool:
        """Take one read's reports; True when what the step shows changed."""
        before = self.state
        state = before
        reports = list(reports)
        replay = bool(reports) and reports[-1] == self._replay_end
        newest = max((i for i, r in enumerate(reports) if r.kind == "progress"), default=None)
        for i, report in enumerate(reports):
            key = (report.kind, report.step)
            fresh = key not in self._seen
            first_read = self._seen.setdefault(key, now)
            when = report.time if report.time is not None else first_read
            if report.kind == "resumed":
                again = self._resume_again and not replay
                if report.step > 0 and ((report.step, report.time) not in self._resumes or again):
                    # The first read of a resume line: training now stands at that step, not
                    # at the last step the old attempt printed (which may lie past the
                    # checkpoint); the rate starts again from there. A re-read changes nothing.
                    self._resumes.append((report.step, report.time))
                    del self._resumes[:-_KEEP_RESUMES]
                    self._samples = []
                    self._resume_again = False
                    state = _with(state, resumed_from_step=report.step, step=report.step,
                                  steps_per_second=None, eta_seconds=None, examples_per_second=None,
                                  updated=when)
                self._new_attempt = False
            elif report.kind == "checkpoint":
                if state.checkpoint_step is None or report.step >= state.checkpoint_step or self._new_checkpoints:
                    # (The old attempt's last lines, read again while it restarts, are not new.)
                    if (report.step, report.path) != (state.checkpoint_step, state.checkpoint_path):
                        self._new_checkpoints = False
                    state = _with(state, checkpoint_step=report.step, checkpoint_path=report.path,
                                  checkpoint_time=when)
            elif fresh or self._new_attempt or report.step > (state.step if state.step is not None else -1):
                # (A line read before, older than what is shown, is an overlapping tail's.)
                printed = report.time if report.time is not None else now if (i == newest and fresh) else None
                state = self._progress(state, report, when, printed)
        if reports and not replay:
            self._last_taken = reports[-1]
        self.state = state
        if reports and len(self._seen) > 256:
            # Lines older than this read's oldest will not be read again: forget them.
            oldest = min(report.step for report in reports)
            self._seen = {key: seen for key, seen in self._seen.items() if key[1] >= oldest}
        return state != before

    def _progress(self, state: TrainingProgress, report: Report, when: float,
                  printed: float | None) -> TrainingProgress:
        if state.step is not None and report.step < state.step and not self._new_attempt:
            # A lower step without a restart seen: an old line (a worker's, a retried one)
            # or a run that went back to a checkpoint; either way, the rate starts again.
            self._samples = []
        # Only a `resumed` line says where a restarted run went on from: the first step a new
        # attempt reports cannot tell a resumed run from one that started again from 0.
        self._new_attempt = False
        steps_per_second = state.steps_per_second if report.step >= (state.step or 0) else None
        if printed is not None:
            rate = self._sample(printed, report.step)
            steps_per_second = rate if rate is not None else steps_per_second
        total = report.total or state.total
        eta = None
        if total and steps_per_second:
            eta = max(0.0, (total - report.step) / steps_per_second)
        return _with(state, step=report.step, total=total, loss=report.loss,
                     examples_per_second=report.examples_per_second, steps_per_second=steps_per_second,
                     eta_seconds=eta, updated=when)

    def _sample(self, printed: float, step: int) -> float | None:
        """Add one (time, step) point of the current attempt; the rate over the window, or None
        while it has no span."""
        samples = self._samples
        if samples and (step < samples[-1][1] or printed < samples[-1][0]):
            samples.clear()  # out of order: an old line or a run gone back; start again
        if not samples or (printed, step) != samples[-1]:
            samples.append((printed, step))
        # Keep the newest point at or before the window's start, so the window is always spanned.
        while len(samples) > 2 and (samples[1][0] <= printed - RATE_WINDOW_SECONDS or len(samples) > _MAX_SAMPLES):
            samples.pop(0)
        (first_time, first_step), (last_time, last_step) = samples[0], samples[-1]
        if last_time - first_time <= 0 or last_step <= first_step:
            return None
        return (last_step - first_step) / (last_time - first_time)


def _with(state: TrainingProgress, **changes: Any) -> TrainingProgress:
    values = {name: getattr(state, name) for name in TrainingProgress.__dataclass_fields__}
    values.update(changes)
    return TrainingProgress(**values)


def annotations_patch(state: TrainingProgress) -> dict[str, str]:
    """The Job annotations for `state` (only those it has), compact JSON values."""
    out: dict[str, str] = {}
    progress = state.progress_dict()
    if progress is not None:
        if state.resumed_from_step is not None:
            progress["resumed_from_step"] = state.resumed_from_step
        out[PROGRESS_ANNOTATION] = json.dumps(progress, sort_keys=True, separators=(",", ":"))
    checkpoint = state.checkpoint_dict()
    if checkpoint is not None:
        out[CHECKPOINT_ANNOTATION] = json.dumps(checkpoint, sort_keys=True, separators=(",", ":"))
    return out


def progress_from_annotations(annotations: dict[str, Any] | None) -> TrainingProgress:
    """What a job's annotations say (for `vpipe status`); anything unreadable is left out."""
    annotations = annotations or {}

    def load(key: str) -> dict[str, Any]:
        try:
            value = json.loads(annotations.get(key) or "{}")
        except (TypeError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    progress = load(PROGRESS_ANNOTATION)
    return progress_from_dicts(progress, load(CHECKPOINT_ANNOTATION), progress.get("resumed_from_step"))


def progress_from_dicts(progress: dict[str, Any] | None, checkpoint: dict[str, Any] | None,
                        resumed_from_step: Any = None) -> TrainingProgress:
    """The figures back from their JSON form (an annotation, a step result's `progress` and
    `last_checkpoint`); values of the wrong type are left out."""
    progress, checkpoint = progress or {}, checkpoint or {}

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def integer(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    path = checkpoint.get("path")
    return TrainingProgress(
        step=integer(progress.get("step")), total=integer(progress.get("total")), loss=number(progress.get("loss")),
        examples_per_second=number(progress.get("examples_per_second")),
        steps_per_second=number(progress.get("steps_per_second")), eta_seconds=number(progress.get("eta_seconds")),
        updated=_from_iso(progress.get("updated")), checkpoint_step=integer(checkpoint.get("step")),
        checkpoint_path=path if isinstance(path, str) else None, checkpoint_time=_from_iso(checkpoint.get("time")),
        resumed_from_step=integer(resumed_from_step),
    )


# Which task's first pod reports for the job: the coordinator where there is one (TF2's chief,
# MPI's master running mpiexec, whose output carries rank 0's), else the first worker (TF1's
# worker 0 is its chief).
REPORTING_TASKS = ("chief", "mpimaster", "master", "worker")


def reporting_pod(job: dict[str, Any]) -> str | None:
    """The pod whose log holds the job's reports (Volcano's pod name `<job>-<task>-0`), or None
    when the job has none of the tasks that report."""
    name = (job.get("metadata") or {}).get("name")
    tasks = [task.get("name") for task in (job.get("spec") or {}).get("tasks") or [] if isinstance(task, dict)]
    for task in REPORTING_TASKS:
        if task in tasks and name:
            return f"{name}-{task}-0"
    return None
