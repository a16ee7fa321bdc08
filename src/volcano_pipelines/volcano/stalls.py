"""Hung tasks (docs/progress.md "Hung tasks"): what the train step makes of the coordinator's
`vpipe:stalled` lines and of the reporting task's own progress stopping. Pure: text and times
in, a verdict out.

The coordinator (the examples' heartbeat.py) prints, into its own log, whenever the set of
stalled tasks changes and every minute while it is not empty:

    vpipe:stalled count=2 tasks=chief[0],worker[1] silent=worker[1] oldest=31 oldest_task=worker[1] time=1733400034
    vpipe:stalled count=0 tasks=none time=1733400090

`tasks` and `silent` are task names with index ranges (`worker[12-15,803]`), `,+N` when more
were left out; `silent`: tasks whose process stopped beating (not running at all), the others
run but made no progress; `oldest`: seconds since the oldest one's last beat or progress."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from collections.abc import Iterable
from typing import Any, Literal, get_args

__all__ = ["ON_STALL_CHOICES", "ON_STALL_FAIL", "ON_STALL_RESTART", "ON_STALL_WARN", "OnStall", "STALL_TIMEOUT_ENV", "describe_stalled", "STALLED_ANNOTATION", "Stall", "StallReport", "format_task_ranges", "index_runs",
           "merge_ranges", "parse_ranges", "parse_stalled", "stall_from_annotations", "with_stall_timeout"]

# What the step does once a task is found stalled.
OnStall = Literal["warn", "fail", "restart"]
ON_STALL_CHOICES: tuple[str, ...] = get_args(OnStall)
ON_STALL_WARN, ON_STALL_FAIL, ON_STALL_RESTART = ON_STALL_CHOICES
# Every task's environment: the stall timeout in seconds (the examples' heartbeat.py reads it).
STALL_TIMEOUT_ENV = "VPIPE_STALL_TIMEOUT"
# The Job annotation naming the stalled tasks while the step waits (JSON value).
STALLED_ANNOTATION = "volcano-pipelines/stalled"
MAX_LINE = 4096
# Ranges shown on one line; past these, a count (never a silent cut).
MAX_RANGES = 40

_LINE = re.compile(r"vpipe:stalled(?:\s|$)")
_PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S*)")
_GROUP = re.compile(r"([A-Za-z][A-Za-z0-9_-]{0,62})\[([0-9,\-]{1,2000})\]")
_MORE = re.compile(r",\+(\d{1,9})$")


@dataclass(frozen=True)
class StallReport:
    """One `vpipe:stalled` line."""

    count: int
    tasks: str  # '' when none
    silent: str = ""
    oldest_seconds: float | None = None
    oldest_task: str | None = None
    time: float | None = None


def parse_stalled(text: str | None) -> StallReport | None:
    """The last well-formed `vpipe:stalled` line in a block of log text (None: there is none)."""
    if not text or "vpipe:stalled" not in text:
        return None
    found = None
    for line in text.splitlines():
        if len(line) > MAX_LINE:
            continue
        match = _LINE.search(line)
        if match is None:
            continue
        pairs = dict(_PAIR.findall(line[match.end():]))
        count = pairs.get("count", "")
        if not count.isdigit():
            continue
        tasks = pairs.get("tasks", "")
        tasks = "" if tasks == "none" or int(count) == 0 else tasks
        if int(count) > 0 and parse_ranges(tasks) == ({}, 0):
            continue  # a count without names: broken
        found = StallReport(count=int(count), tasks=tasks, silent="" if pairs.get("silent") in (None, "none") else pairs["silent"],
                            oldest_seconds=_number(pairs.get("oldest")), oldest_task=pairs.get("oldest_task") or None,
                            time=_number(pairs.get("time")))
    return found


def _number(value: str | None) -> float | None:
    if value is None or not re.fullmatch(r"\d{1,12}(\.\d{1,6})?", value):
        return None
    return float(value)


def parse_ranges(text: str) -> tuple[dict[str, set[int]], int]:
    """`chief[0],worker[12-15,803],+7` -> ({'chief': {0}, 'worker': {12, 13, 14, 15, 803}}, 7)."""
    more = 0
    found = _MORE.search(text)
    if found:
        more, text = int(found.group(1)), text[: found.start()]
    out: dict[str, set[int]] = {}
    for task, spans in _GROUP.findall(text):
        for span in spans.split(","):
            low, _, high = span.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                continue
            first, last = int(low), int(high or low)
            if last < first or last - first > 100_000:
                continue
            out.setdefault(task, set()).update(range(first, last + 1))
    return out, more


def index_runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """`[12, 13, 14, 15, 803]` -> `[(12, 15), (803, 803)]`: consecutive indices as runs."""
    runs: list[tuple[int, int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], index)
        else:
            runs.append((index, index))
    return runs


def format_task_ranges(tasks: dict[str, set[int]], more: int = 0) -> str:
    """The inverse of parse_ranges: `chief[0],worker[12-15,803]`, at most MAX_RANGES ranges,
    then `,+N` for the tasks left out."""
    parts: list[str] = []
    shown = 0
    for task in sorted(tasks):
        spans: list[str] = []
        for first, last in index_runs(tasks[task]):
            if shown < MAX_RANGES:
                spans.append(str(first) if first == last else f"{first}-{last}")
                shown += 1
            else:
                more += last - first + 1
        if spans:
            parts.append(f"{task}[{','.join(spans)}]")
    return ",".join(parts) + (f",+{more}" if more else "")


def merge_ranges(*texts: str) -> str:
    merged: dict[str, set[int]] = {}
    more = 0
    for text in texts:
        tasks, extra = parse_ranges(text)
        more += extra
        for task, indices in tasks.items():
            merged.setdefault(task, set()).update(indices)
    return format_task_ranges(merged, more)


@dataclass(frozen=True)
class Stall:
    """The stalled tasks the step knows of now."""

    tasks: str  # `chief[0],worker[1]`
    silent: str  # those whose process stopped beating
    oldest_seconds: float
    since: float  # Unix seconds: when the step first saw these tasks stalled
    action: str  # what --on-stall did: warn | fail | restart

    def describe(self) -> str:
        """`worker[1] (no heartbeat), chief[0] (no progress) for 31s`."""
        silent, _ = parse_ranges(self.silent)
        everyone, more = parse_ranges(self.tasks)
        busy = {task: indices - silent.get(task, set()) for task, indices in everyone.items()}
        busy = {task: indices for task, indices in busy.items() if indices}
        parts = []
        if silent:
            parts.append(f"{format_task_ranges(silent)} (no heartbeat)")
        if busy or more:
            parts.append(f"{format_task_ranges(busy, more)} (no progress)")
        return f"{', '.join(parts) or self.tasks} for {self.oldest_seconds:.0f}s"

    def to_dict(self) -> dict[str, Any]:
        since = datetime.fromtimestamp(self.since, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"tasks": self.tasks, "silent": self.silent, "oldest_seconds": round(self.oldest_seconds),
                "since": since, "action": self.action}

    def annotation(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))


def with_stall_timeout(job: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The job with $VPIPE_STALL_TIMEOUT in every task's containers (one entry per task
    template, not per replica): the tasks' heartbeats and the coordinator's scan follow it."""
    value = f"{seconds:g}"
    for task in (job.get("spec") or {}).get("tasks") or []:
        for container in ((task.get("template") or {}).get("spec") or {}).get("containers") or []:
            env = [e for e in container.get("env") or [] if e.get("name") != STALL_TIMEOUT_ENV]
            container["env"] = [*env, {"name": STALL_TIMEOUT_ENV, "value": value}]
    return job


def describe_stalled(stalled: dict[str, Any]) -> str:
    """A result's / record's `stalled` in one line: `worker[1] (no heartbeat: worker[1]), 31s
    without progress, since 2026-12-05T13:40:00Z, on_stall=warn, cleared 2026-12-05T13:41:10Z`."""
    text = (f"{stalled.get('tasks')} (no heartbeat: {stalled.get('silent') or 'none'}), "
            f"{stalled.get('oldest_seconds')}s without progress, since {stalled.get('since')}, "
            f"on_stall={stalled.get('action')}")
    return text + (f", cleared {stalled['cleared']}" if stalled.get("cleared") else "")


def stall_from_annotations(annotations: dict[str, Any] | None) -> dict[str, Any] | None:
    """`vpipe status`: the stalled tasks the waiting step last wrote on the job."""
    try:
        value = json.loads((annotations or {}).get(STALLED_ANNOTATION) or "null")
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) and isinstance(value.get("tasks"), str) else None
