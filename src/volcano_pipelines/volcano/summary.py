"""A job at a glance, at any size (DESIGN.md "views at the seed's size"): the same few lines for
3 pods and for 11,000. Counts per role and phase; the restarts and their causes; the pods that
are not as they should be (failed, with their cause; pending while others run), named as index
ranges per role (`worker[12-15,803]`); the stalled tasks with how long since their progress;
and a count of whatever did not fit: never a silent cut, never a row per pod. Pure: counts,
pods and records in, lines out. `vpipe status`, the live display and the step's log all draw
from here; `--json` keeps every figure (the groups in full, as ranges)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from volcano_pipelines.volcano.report_lines import TrainingProgress
from volcano_pipelines.volcano.slices import SLICED_ROLES, task_offsets
from volcano_pipelines.volcano.stalls import index_runs
from volcano_pipelines.volcano.status import FINAL_PHASES, JobStatus, TaskCounts, pod_end, pod_task

__all__ = ["MAX_LINES", "JobSummary", "abnormal_pods", "format_eta", "format_ranges", "format_training", "range_count",
           "summary_details", "summary_lines", "training_figures"]

# The most lines a summary takes, whatever the job's size (a screen).
MAX_LINES = 30
# Index ranges shown on one line; the rest is counted on that line.
MAX_RANGES_PER_LINE = 12
_PHASES = ("running", "pending", "succeeded", "failed", "stopped")


def format_ranges(indices: Iterable[int]) -> str:
    """`[12, 13, 14, 15, 803]` -> `12-15,803` (every index: the form --json keeps)."""
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in index_runs(indices))


def _span_size(span: str) -> int:
    first, _, last = span.partition("-")
    return int(last or first) - int(first) + 1


def range_count(ranges: str) -> int:
    """How many indices `12-15,803` names (5)."""
    return sum(_span_size(span) for span in ranges.split(",") if span)


def _index(pod: Mapping[str, Any], task: str) -> int | None:
    """A Volcano pod's index in its task, from its name `<job>-<task>-<index>`."""
    name = str((pod.get("metadata") or {}).get("name") or "")
    head, _, tail = name.rpartition("-")
    return int(tail) if tail.isdigit() and head.endswith(f"-{task}") else None


def abnormal_pods(pods: Iterable[Mapping[str, Any]], job_phase: str | None = None,
                  job: Mapping[str, Any] | None = None) -> dict[str, dict[str, str]]:
    """The pods that are not as they should be, grouped by what is wrong (`failed: OOM killed`,
    `failed: evicted`, `pending`) and role, as index ranges (`12-15,803`), every one. Pending pods count only once
    others of the job run (before that the whole gang waits: the counts say so). One pass. With the
    `job`, a role split over several tasks (volcano/slices.py) is named by role and role index:
    pod 5 of `worker-s1` is `worker[offset + 5]`."""
    tasks = {t.get("name"): int(t.get("replicas") or 0) for t in ((job or {}).get("spec") or {}).get("tasks") or []}
    offsets = task_offsets(tasks, SLICED_ROLES)
    groups: dict[str, dict[str, set[int]]] = {}
    pending: dict[str, set[int]] = {}
    running = False
    for pod in pods:
        own_task = pod_task(pod)
        index = _index(pod, own_task) if own_task else None
        if own_task is None or index is None:
            continue
        task, offset = offsets.get(own_task, (own_task, 0))
        index += offset
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if phase == "Running":
            running = True
        elif phase in ("Pending", "Unknown"):
            pending.setdefault(task, set()).add(index)
        elif phase == "Failed" or (pod.get("metadata") or {}).get("deletionTimestamp"):
            end = pod_end(pod, job_phase=job_phase)
            if end is not None and end.failure:
                groups.setdefault(f"failed: {end.cause}", {}).setdefault(task, set()).add(index)
    if running and pending:
        groups["pending"] = pending
    return {what: {task: format_ranges(indices) for task, indices in sorted(tasks.items())}
            for what, tasks in groups.items()}


@dataclass(frozen=True)
class JobSummary:
    name: str
    phase: str
    retries: int = 0
    tasks: Mapping[str, TaskCounts] = field(default_factory=dict)
    problem: str | None = None  # why the gang waits
    # What is wrong -> role -> index ranges (abnormal_pods).
    abnormal: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The job's restarts, each with its cause (TrainResult.restarts: number, cause, pod, ...).
    restarts: Sequence[Mapping[str, Any]] = ()
    # Tasks without progress: (name or ranges, e.g. `worker[17]`, seconds since their progress).
    stalled: Sequence[tuple[str, float]] = ()

    @classmethod
    def of(cls, name: str, status: JobStatus, problem: str | None = None, **more: Any) -> JobSummary:
        return cls(name=name, phase=status.phase, retries=status.retries, tasks=status.tasks, problem=problem, **more)


def _counts(counts: TaskCounts, finished: bool) -> str:
    values = counts.to_dict()
    total = sum(values.values())
    parts = [f"{values[phase]:,} {phase}" for phase in _PHASES if values[phase]]
    return f"{total:,} pod{'s' if total != 1 else ''}: " + ", ".join(parts) if parts else \
        "no pods left" if finished else "no pods yet"


def _group_line(what: str, tasks: Mapping[str, str]) -> str:
    """`failed: OOM killed (5): worker[12-15,803]`: at most MAX_RANGES_PER_LINE ranges, then
    how many pods were left out."""
    named, left, budget = [], 0, MAX_RANGES_PER_LINE
    for task, ranges in tasks.items():
        spans = [span for span in ranges.split(",") if span]
        shown = spans[:max(1, budget)]
        budget -= len(shown)
        named.append(f"{task}[{','.join(shown)}]")
        left += sum(_span_size(span) for span in spans[len(shown):])
    total = sum(range_count(ranges) for ranges in tasks.values())
    line = f"{what} ({total:,}): " + " ".join(named)
    return line + (f" and {left:,} more" if left else "")


def _head(summary: JobSummary) -> list[str]:
    """The phase, the counts per role and phase, why the gang waits."""
    lines = [f"job {summary.name}: {summary.phase}" + (f" (retries {summary.retries})" if summary.retries else "")]
    width = max((len(task) for task in summary.tasks), default=0)
    lines += [f"  {task:<{width}}  {_counts(counts, summary.phase in FINAL_PHASES)}"
              for task, counts in summary.tasks.items()]
    if summary.problem:
        lines.append(f"  waiting: {summary.problem}")
    return lines


def summary_details(summary: JobSummary, max_lines: int = MAX_LINES) -> list[str]:
    """What the counts cannot say, in the lines summary_lines gives it."""
    return summary_lines(summary, max_lines)[len(_head(summary)):]


def summary_lines(summary: JobSummary, max_lines: int = MAX_LINES) -> list[str]:
    """The job in at most `max_lines` lines (at least 4)."""
    lines = _head(summary)
    details: list[str] = []
    if summary.restarts:
        causes = Counter(str(r.get("cause") or "unknown") for r in summary.restarts)
        details.append(f"restarts ({len(summary.restarts)}): "
                       + ", ".join(f"{cause} ×{n}" if n > 1 else cause for cause, n in causes.most_common()))
    # Failures first, the most pods first; pending last (often only slow to start).
    groups = sorted(summary.abnormal.items(), key=lambda item: (
        item[0] == "pending", -sum(range_count(ranges) for ranges in item[1].values()), item[0]))
    details += [_group_line(what, tasks) for what, tasks in groups if tasks]
    stalled = sorted(summary.stalled, key=lambda item: -item[1])
    details += [f"stalled: {who} (no progress for {format_eta(seconds)})" for who, seconds in stalled]
    room = max(1, max_lines - len(lines))
    if len(details) > room:
        kept = details[:room - 1]
        details = [*kept, f"… {len(details) - len(kept)} more lines left out (--json has every figure)"]
    return lines + details


# --- the training's figures in words (the live bar, the logs, the result)


def format_eta(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def training_figures(state: TrainingProgress, *, short: bool = False) -> list[str]:
    """The reported figures in words, one per item (`step 1200/6000 (20.0%)`, `812.5 examples/s`,
    `loss 0.431`, `ETA 3m12s`, ...); `short`: the terse form beside a progress bar, which shows
    the fraction itself."""
    parts: list[str] = []
    if state.step is not None:
        text = f"step {state.step}" + (f"/{state.total}" if state.total else "")
        if state.fraction is not None and not short:
            text += f" ({100 * state.fraction:.1f}%)"
        parts.append(text)
    if state.examples_per_second is not None:
        parts.append(f"{state.examples_per_second:.1f} " + ("ex/s" if short else "examples/s"))
    elif state.steps_per_second is not None and not short:
        parts.append(f"{state.steps_per_second:.2f} steps/s")
    if state.loss is not None:
        parts.append(f"loss {state.loss:.4g}")
    eta = format_eta(state.eta_seconds)
    if eta is not None:
        parts.append(f"ETA {eta}")
    if state.checkpoint_step is not None:
        parts.append(f"ckpt {state.checkpoint_step}" if short else f"checkpoint at step {state.checkpoint_step}")
    if state.resumed_from_step is not None:
        parts.append(f"resumed from {'' if short else 'step '}{state.resumed_from_step}")
    return parts


def format_training(name: str, state: TrainingProgress) -> str:
    """One line for logs and terminals: `job mnist: step 1200/6000 (20.0%), 812.5 examples/s,
    loss 0.4310, ETA 3m12s, checkpoint at step 1200`."""
    if not state.reported:
        return f"job {name}: no progress reported"
    return f"job {name}: " + ", ".join(training_figures(state))
