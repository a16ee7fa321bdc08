"""The Markdown summary of a post-mortem record (postmortem/record.py): the job, its restarts,
its pods (a row each for a small job; grouped by what happened, with the failed ones named, for
a large one: the same page for 100 pods and 11,000), the failed pods' last log lines and the
newest events. Pure: the record in, the text out."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from volcano_pipelines.postmortem.record import pod_groups
from volcano_pipelines.volcano.stalls import describe_stalled

__all__ = ["markdown"]

# Index ranges shown in one cell of a large job's pod groups; the rest are counted.
MAX_SPANS = 12
# Failed pods of a large job whose containers' states and log lines the Markdown shows.
DETAILED_FAILED_PODS = 5


def _cell(value: Any) -> str:
    return re.sub(r"\s*\n\s*", " ", "" if value is None else str(value)).replace("|", "\\|")


def _fence(lines: Sequence[str]) -> list[str]:
    text = "\n".join(lines)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *lines, fence]


def _pods_row(record: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> str:
    """`11,001 (0 failed)`: every pod the job had, from the record's groups where it kept them."""
    groups = record.get("pod_groups")
    total = sum(int(g.get("pods") or 0) for g in groups) if groups else len(pods)
    failed = sum(1 for p in pods if p.get("failed"))
    return f"{total:,} ({failed:,} failed" + (f", {total - len(pods):,} not in the record)" if total > len(pods) else ")")


def _pod_row(p: Mapping[str, Any], runs: bool) -> str:
    end = p.get("end") or {}
    what = p.get("outcome")
    if end.get("exit_code") is not None and not str(what).startswith("exit code"):
        what = f"{what} (exit code {end['exit_code']})"
    phase = p.get("phase")
    if p.get("deleted") and phase in ("Pending", "Running"):
        phase = f"deleted while {phase}"  # its last phase seen; the pod is gone
    return (f"| {_cell(p.get('name'))} |" + (f" {_cell(p.get('run'))} |" if runs else "")
            + f" {_cell(p.get('task'))} | {_cell(p.get('node'))} | {_cell(phase)} | {_cell(what)} |")


def _pod_table(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row per pod, with a run column where a restart's pods repeat the names."""
    runs = any((p.get("run") or 1) > 1 for p in pods)
    return (["| pod |" + (" run |" if runs else "") + " task | node | phase | what happened |",
             "|---|" + ("---|" if runs else "") + "---|---|---|---|"]
            + [_pod_row(p, runs) for p in pods])


def _pod_groups(record: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], failed_rows: int) -> list[str]:
    """A large job's pods at a glance (the same lines for 100 pods and 11,000): per task, run
    and what happened, how many and which (index ranges), from the record's groups of every
    pod (kept when the record dropped pods to stay within its bound); then the first
    `failed_rows` failed pods by name."""
    groups = record.get("pod_groups") or pod_groups(pods)
    total = sum(int(g.get("pods") or 0) for g in groups)
    runs = any(int(g.get("run") or 1) > 1 for g in groups)
    lines = [f"{total:,} pods by task and what happened" + (
        " (every pod is in the JSON record):" if total <= len(pods) else f" ({len(pods):,} of them in the JSON record):"), "",
             "| task |" + (" run |" if runs else "") + " phase | what happened | pods | which |",
             "|---|" + ("---|" if runs else "") + "---|---|---|---|"]
    for g in groups:
        spans = str(g.get("indices") or "").split(",")
        which = ",".join(spans[:MAX_SPANS]) + (f" and {len(spans) - MAX_SPANS} more ranges" if len(spans) > MAX_SPANS else "")
        lines.append(f"| {_cell(g.get('task'))} |" + (f" {g.get('run') or 1} |" if runs else "")
                     + f" {_cell(g.get('phase'))} | {_cell(g.get('outcome'))} | {int(g.get('pods') or 0):,} | {_cell(which)} |")
    failed = [p for p in pods if p.get("failed")]
    if failed:
        shown = failed[:failed_rows]
        lines += ["", f"Failed pods ({len(failed):,}" + (f", the first {len(shown)}" if len(shown) < len(failed) else "")
                  + "):", "", *_pod_table(shown)]
    return lines


def _events(events: Sequence[Mapping[str, Any]], limit: int, grouped: bool) -> list[str]:
    """The newest `limit` events; for a large job (`grouped`) with more, grouped by type,
    reason and kind of object (warnings first), each with its count and newest message: its
    thousands of `Created` events would otherwise push its one warning out of the newest rows."""
    if not events:
        return []
    if not grouped or len(events) <= limit:
        lines = ["", "## Events (newest last)", "", "| last seen | object | type | reason | message |", "|---|---|---|---|---|"]
        return lines + [f"| {_cell(e.get('last'))} | {_cell(e.get('object'))} | {_cell(e.get('type'))} | "
                        f"{_cell(e.get('reason'))} | {_cell(e.get('message'))} |" for e in events[-limit:]]
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for e in events:
        kind = str(e.get("object") or "?").partition("/")[0]
        groups.setdefault((str(e.get("type") or "?"), str(e.get("reason") or "?"), kind), []).append(e)
    ordered = sorted(groups.items(), key=lambda item: (item[0][0] != "Warning", -len(item[1]), item[0]))
    lines = ["", f"## Events ({len(events):,}, by reason)", "",
             "| type | reason | object | events | last seen | newest message |", "|---|---|---|---|---|---|"]
    for (kind_type, reason, kind), items in ordered[:limit]:
        newest = items[-1]
        count = sum(int(e.get("count") or 1) for e in items)
        lines.append(f"| {_cell(kind_type)} | {_cell(reason)} | {_cell(kind)} | {count:,} | {_cell(newest.get('last'))} | "
                     f"{_cell(newest.get('object'))}: {_cell(newest.get('message'))} |")
    if len(ordered) > limit:
        lines.append(f"\n... and {len(ordered) - limit} more kinds of event in the JSON record.")
    return lines


def markdown(record: Mapping[str, Any], *, table_rows: int = 50, log_lines: int = 20, events: int = 20) -> str:
    """A readable summary of a record: the job, its restarts, one row per pod (up to
    `table_rows` pods; a larger job's pods grouped by what happened, the failed ones named), the
    last `log_lines` of each failed pod's containers, the newest `events` (grouped past that)."""
    job = record.get("job") or {}
    pods: list[Mapping[str, Any]] = record.get("pods") or []
    lines = [f"# Post-mortem: job {job.get('namespace')}/{job.get('name')}", ""]
    rows = [("phase", job.get("phase")), ("reason", job.get("reason")), ("message", job.get("message")),
            ("restarts", f"{job.get('retries', 0)} (max_retry {job.get('max_retry')})"),
            ("queue", job.get("queue")), ("created", job.get("created")), ("finished", job.get("finished")),
            ("pods", _pods_row(record, pods)),
            ("collected", record.get("collected_at"))]
    if (record.get("stalled") or {}).get("tasks"):  # hung tasks the waiting step named
        rows.insert(3, ("stalled tasks", describe_stalled(record["stalled"])))
    if record.get("cancelled"):  # the phase is the job's when the step was cancelled: say what came next
        rows.insert(1, ("cancelled", record["cancelled"]))
    lines += ["| | |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in rows if v is not None]
    restarts = record.get("restarts") or []
    if restarts:
        lines += ["", "## Restarts", ""]
        for r in restarts:
            lines.append(f"{r.get('number', '?')}. {_cell(r.get('text') or r.get('cause'))}")
    lines += ["", "## Pods", ""]
    if len(pods) <= table_rows:
        lines += _pod_table(pods)
    else:  # a large job: what happened, grouped, then the failed pods by name
        lines += _pod_groups(record, pods, table_rows)
    large = len(pods) > table_rows
    detailed = [p for p in pods if p.get("failed") and p.get("detail")]
    if large and len(detailed) > DETAILED_FAILED_PODS:  # their logs would fill pages
        lines += ["", f"The logs of the first {DETAILED_FAILED_PODS} of {len(detailed):,} failed pods follow; "
                      "the JSON record has the others'."]
        detailed = detailed[:DETAILED_FAILED_PODS]
    for p in detailed:
        lines += ["", f"### {p.get('name')} ({p.get('task')}): {p.get('outcome')}"]
        end = p.get("end") or {}
        if end.get("message"):
            lines += ["", _cell(end["message"])]
        for c in p.get("containers") or []:
            state = c.get("state") or {}
            if state.get("state") == "terminated":
                # What the API said, and only that: never "exit code None" (0 is an exit code).
                said = [f"exit code {state['exit_code']}" if state.get("exit_code") is not None else "",
                        f"reason {state['reason']}" if state.get("reason") else "",
                        f"{state.get('started_at') or '?'} - {state.get('finished_at') or '?'}"]
                lines += ["", f"- container `{c.get('name')}`: " + ", ".join(part for part in said if part)]
            tail = (c.get("log") or [])[-log_lines:]
            if tail:
                lines += ["", f"Last log lines of `{c.get('name')}`:", "", *_fence(tail)]
    lines += _events(record.get("events") or [], events, grouped=large)
    notes = record.get("notes") or []
    if notes:
        lines += ["", "## Not in this record", ""] + [f"- {_cell(n)}" for n in notes]
    return "\n".join(lines) + "\n"
