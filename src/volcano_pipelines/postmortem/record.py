"""The post-mortem record of a job (issue 30): for every pod its task, node, phase history,
each container's state (exit code, reason, message, start and finish), the last log lines of
every container, and the job's and pods' events, bounded in size. Pure: the dicts the API
returned (and the log text read beside them) in, the record (JSON-ready) out; its Markdown
summary is `postmortem/markdown.py`. The reads are `postmortem/reads.py` (cluster) and the local
backend's own files.

Only named fields are copied, never a pod's spec as a whole: environment variables (where
secrets end up) are never part of the record."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.volcano.status import job_status, pod_end, pod_task

__all__ = ["RECORD_KIND", "Limits", "build_record", "index_in_name", "log_pods", "pod_groups", "record_size"]

RECORD_KIND = "VolcanoJobPostMortem"
Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Limits:
    """How much the record may hold. When it would exceed `max_bytes` (as JSON) it drops, in
    this order, log lines of pods that did not fail (oldest lines first), the detail of pods
    beyond the first `pods_per_task` of each task (failed pods are kept first), log lines of
    the failed pods, older events, and at last whole pods; and says what it dropped."""

    max_bytes: int = 1024 * 1024
    log_lines: int = 50  # per container
    line_chars: int = 500  # a longer log line is cut
    text_chars: int = 2000  # any message or other text field is cut
    pods_per_task: int = 5  # pods of each task kept in detail when the record must shrink
    events: int = 500  # newest events kept at most


def _cut(text: Any, limit: int) -> str | None:
    if text is None:
        return None
    out = str(text)
    return out if len(out) <= limit else out[:limit] + f"... [{len(out) - limit} more characters]"


def index_in_name(name: str) -> tuple[str, int]:
    """Natural order of `<job>-<task>-<i>` names (worker-10 after worker-9)."""
    match = re.match(r"^(.*?)(\d+)$", name)
    return (match.group(1), int(match.group(2))) if match else (name, -1)


def _state(state: Obj | None) -> dict[str, Any] | None:
    """One container state ({running|waiting|terminated: {...}}) as a flat dict."""
    if not state:
        return None
    for kind in ("terminated", "running", "waiting"):
        detail = state.get(kind)
        if detail is not None:
            out: dict[str, Any] = {"state": kind}
            for key, name in (("exitCode", "exit_code"), ("signal", "signal"), ("reason", "reason"),
                              ("message", "message"), ("startedAt", "started_at"), ("finishedAt", "finished_at")):
                if detail.get(key) is not None:
                    out[name] = detail[key]
            return out
    return None


def _log_lines(text: str | None, limits: Limits) -> list[str]:
    if not text:
        return []
    lines = text.splitlines()[-limits.log_lines:] if limits.log_lines > 0 else []
    return [_cut(line, limits.line_chars) or "" for line in lines]


def _containers(pod: Obj, logs: Mapping[str, str | None], limits: Limits) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    images = {c.get("name"): c.get("image") for c in [*((pod.get("spec") or {}).get("initContainers") or []),
                                                        *((pod.get("spec") or {}).get("containers") or [])]}
    out = []
    for init, statuses in ((True, status.get("initContainerStatuses") or []), (False, status.get("containerStatuses") or [])):
        for cs in statuses:
            name = cs.get("name")
            entry: dict[str, Any] = {"name": name, "init": init, "image": images.get(name) or cs.get("image"),
                                     "restarts": int(cs.get("restartCount") or 0), "state": _state(cs.get("state"))}
            last = _state(cs.get("lastState"))
            if last:
                entry["last_state"] = last
            for state in (entry["state"], last):
                if state and "message" in state:
                    state["message"] = _cut(state["message"], limits.text_chars)
            lines = _log_lines(logs.get(name), limits)
            entry["log"] = lines
            entry["log_lines_dropped"] = 0
            out.append(entry)
    # A container the API names only in the spec (the pod never started) still gets its log slot.
    named = {c["name"] for c in out}
    for name, text in logs.items():
        if name not in named and text:
            out.append({"name": name, "init": False, "image": images.get(name), "restarts": 0, "state": None,
                        "log": _log_lines(text, limits), "log_lines_dropped": 0})
    return out


def _conditions(pod: Obj, limits: Limits) -> list[dict[str, Any]]:
    """The pod's phase history as Kubernetes keeps it: one condition per type, with the time of
    its last change, oldest first."""
    out = []
    for c in (pod.get("status") or {}).get("conditions") or []:
        entry = {"type": c.get("type"), "status": c.get("status"), "time": c.get("lastTransitionTime")}
        if c.get("reason"):
            entry["reason"] = c["reason"]
        if c.get("message"):
            entry["message"] = _cut(c["message"], limits.text_chars)
        out.append(entry)
    return sorted(out, key=lambda c: c.get("time") or "")


def _pod_entry(pod: Obj, logs: Mapping[str, str | None], deleted: bool, job_phase: str | None,
               limits: Limits) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    end = pod_end(pod, job_phase=job_phase, deleted=deleted)
    if end is not None:
        outcome = end.cause
    else:
        outcome = {"Succeeded": "succeeded", "Running": "running"}.get(status.get("phase") or "", "not started")
    entry: dict[str, Any] = {
        "name": meta.get("name"),
        "task": pod_task(pod),
        "node": (pod.get("spec") or {}).get("nodeName"),
        "phase": status.get("phase"),
        "outcome": outcome,
        "failed": bool(end is not None and end.failure),
        "detail": True,
        "uid": meta.get("uid"),
        "created": meta.get("creationTimestamp"),
        "started": status.get("startTime"),
        "deleted": deleted or bool(meta.get("deletionTimestamp")),
    }
    if end is not None:
        entry["end"] = {k: v for k, v in end.to_dict().items() if k not in ("pod", "task", "node") and v is not None}
        if "message" in entry["end"]:
            entry["end"]["message"] = _cut(entry["end"]["message"], limits.text_chars)
    if status.get("reason"):
        entry["reason"] = status["reason"]
    if status.get("message"):
        entry["message"] = _cut(status["message"], limits.text_chars)
    entry["conditions"] = _conditions(pod, limits)
    entry["containers"] = _containers(pod, logs, limits)
    return entry


def _number_runs(entries: list[dict[str, Any]]) -> None:
    """Each pod's run of the job (1: the first; a restart's pods reuse the names), by creation
    among the pods of its name the record holds (ties keep the order they were listed in)."""
    by_name: dict[Any, list[dict[str, Any]]] = {}
    for entry in entries:
        by_name.setdefault(entry.get("name"), []).append(entry)
    for same in by_name.values():
        for run, entry in enumerate(sorted(same, key=lambda e: e.get("created") or ""), start=1):
            entry["run"] = run


def log_pods(job: Obj, pods: Sequence[Obj], limits: Limits) -> list[Obj]:
    """The pods whose logs are worth reading: every pod that ended badly, then the first
    `pods_per_task` of each task (a 200-pod job costs a bounded number of log reads)."""
    phase = job_status(job).phase
    order = sorted(pods, key=lambda p: index_in_name((p.get("metadata") or {}).get("name") or ""))
    chosen = [p for p in order if (end := pod_end(p, job_phase=phase)) is not None and end.failure]
    per_task: dict[str | None, int] = {}
    for p in order:
        task = pod_task(p)
        per_task[task] = per_task.get(task, 0) + 1
        if per_task[task] <= limits.pods_per_task and not any(p is c for c in chosen):
            chosen.append(p)
    return chosen


def _event_entry(event: Obj, limits: Limits) -> dict[str, Any]:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    return {
        "object": f"{involved.get('kind') or '?'}/{involved.get('name') or '?'}",
        "type": event.get("type"),
        "reason": event.get("reason"),
        "message": _cut(event.get("message") or event.get("note"), limits.text_chars),
        "count": int(event.get("count") or 1),
        "first": event.get("firstTimestamp") or event.get("eventTime"),
        "last": event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp"),
    }


def record_size(record: Mapping[str, Any]) -> int:
    """Bytes of the record as it is saved (compact JSON, UTF-8)."""
    return len(json.dumps(record, separators=(",", ":"), sort_keys=True).encode())


def _compact(entry: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("name", "run", "task", "node", "phase", "outcome", "failed", "deleted")
    out = {k: entry.get(k) for k in keep}
    out["detail"] = False
    if entry.get("end"):
        out["end"] = {k: v for k, v in entry["end"].items() if k in ("cause", "exit_code", "reason", "at")}
    return out


def pod_groups(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every pod entry counted by task, run, phase and what happened, with the pods' indices as
    ranges (`0-16,20-3999`): the whole job's fate in a few rows, kept when the record must drop
    pods to stay within its bound (at 11,001 pods it keeps about 4,600)."""
    from volcano_pipelines.volcano.summary import format_ranges

    groups: dict[tuple[str, int, str, str], list[int]] = {}
    for entry in entries:
        phase = str(entry.get("phase") or "?")
        if entry.get("deleted") and phase in ("Pending", "Running"):
            phase = f"deleted while {phase}"  # its last phase seen; the pod is gone
        key = (str(entry.get("task") or "?"), int(entry.get("run") or 1), phase, str(entry.get("outcome") or "?"))
        groups.setdefault(key, []).append(index_in_name(str(entry.get("name") or ""))[1])
    return [{"task": task, "run": run, "phase": phase, "outcome": outcome, "pods": len(indices),
             "indices": format_ranges(i for i in indices if i >= 0)}
            for (task, run, phase, outcome), indices in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1], -len(g[1])))]


def build_record(
    job: Obj,
    pods: Sequence[Obj],
    events: Iterable[Obj],
    logs: Mapping[str, Mapping[str, str | None]],
    *,
    collected_at: str,
    deleted: Iterable[str] = (),
    restarts: Sequence[Mapping[str, Any]] = (),
    notes: Sequence[str] = (),
    limits: Limits = Limits(),
    stalled: Mapping[str, Any] | None = None,  # the hung tasks the waiting step named (steps/_follow.py)
    cancelled: str | None = None,  # the step was cancelled and stops the job: why and how
) -> dict[str, Any]:
    """The post-mortem record. `pods`: every pod of the job as last seen (those already deleted
    included, their uids in `deleted`); `logs`: pod uid (or name) -> container -> log text (None where
    none could be read); `notes`: what the collector could not read (one line each)."""
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job_status(job)
    state = (job.get("status") or {}).get("state") or {}
    gone = set(deleted)
    task_order = {t.get("name"): i for i, t in enumerate(spec.get("tasks") or [])}

    def order(pod: Obj) -> tuple[int, tuple[str, int]]:
        task = pod_task(pod)
        return (task_order.get(task, len(task_order)), index_in_name((pod.get("metadata") or {}).get("name") or ""))

    def pod_logs(pod: Obj) -> Mapping[str, str | None]:
        # By uid where the reader knows it; by name only for a pod that still exists (a
        # deleted pod's name may be worn by its successor after a restart).
        meta = pod.get("metadata") or {}
        if meta.get("uid") in logs:
            return logs[meta["uid"]]
        return {} if meta.get("uid") in gone else logs.get(meta.get("name") or "", {})

    entries = [_pod_entry(p, pod_logs(p), (p.get("metadata") or {}).get("uid") in gone, status.phase, limits)
               for p in sorted(pods, key=order)]
    _number_runs(entries)
    all_events = sorted((_event_entry(e, limits) for e in events), key=lambda e: e.get("last") or "")
    dropped: dict[str, int] = {"log_lines": 0, "pods_detail": 0, "events": 0, "pods": 0}
    if len(all_events) > limits.events:
        dropped["events"] = len(all_events) - limits.events
        all_events = all_events[-limits.events:]
    record: dict[str, Any] = {
        "kind": RECORD_KIND,
        "version": 1,
        "collected_at": collected_at,
        "job": {
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "created": meta.get("creationTimestamp"),
            "phase": status.phase,
            "reason": status.reason,
            "message": _cut(status.message, limits.text_chars),
            "finished": state.get("lastTransitionTime") if status.finished else None,
            "retries": status.retries,
            "max_retry": spec.get("maxRetry"),
            "queue": spec.get("queue"),
            "tasks": {t.get("name"): t.get("replicas") for t in spec.get("tasks") or []},
            "phase_history": [
                {"phase": c.get("status"), "time": c.get("lastTransitionTime")}
                for c in (job.get("status") or {}).get("conditions") or [] if isinstance(c, Mapping)
            ],
        },
        "restarts": [dict(r) for r in restarts],
        "pod_groups": pod_groups(entries),
        "pods": entries,
        "events": all_events,
        "notes": list(notes),
        "dropped": dropped,
        "limits": {"max_bytes": limits.max_bytes, "log_lines": limits.log_lines, "pods_per_task": limits.pods_per_task},
    }
    record.update({"stalled": dict(stalled)} if stalled else {})
    record.update({"cancelled": cancelled} if cancelled else {})
    _shrink(record, limits)
    record["bytes"] = 0
    while record["bytes"] != record_size(record):  # its own digits count too: settles in a step or two
        record["bytes"] = record_size(record)
    return record


def _halve_logs(entries: list[dict[str, Any]], dropped: dict[str, int]) -> bool:
    """Halve the log lines kept for each container of these pods (oldest go); False if none left."""
    changed = False
    for entry in entries:
        for c in entry.get("containers") or []:
            lines = c.get("log") or []
            if lines:
                keep = len(lines) // 2
                c["log_lines_dropped"] = c.get("log_lines_dropped", 0) + len(lines) - keep
                dropped["log_lines"] += len(lines) - keep
                c["log"] = lines[len(lines) - keep:]
                changed = True
    return changed


def _shrink(record: dict[str, Any], limits: Limits) -> None:
    dropped: dict[str, int] = record["dropped"]
    # Headroom for the size field and the notes added below.
    budget = limits.max_bytes - 512
    pods: list[dict[str, Any]] = record["pods"]
    # 1. Log lines of pods that did not fail (oldest lines first).
    while record_size(record) > budget and _halve_logs([p for p in pods if not p["failed"]], dropped):
        pass
    # 2. Detail of pods beyond the first K of each task (failed ones kept first).
    if record_size(record) > budget:
        kept: dict[Any, int] = {}
        ranked = sorted(range(len(pods)), key=lambda i: (not pods[i]["failed"], i))
        for i in ranked:
            task = pods[i].get("task")
            kept[task] = kept.get(task, 0) + 1
            if kept[task] > limits.pods_per_task and pods[i]["detail"]:
                pods[i] = _compact(pods[i])
                dropped["pods_detail"] += 1
    # Then the failed pods' log lines: what a reader wants most goes last.
    while record_size(record) > budget and _halve_logs([p for p in pods if p["failed"] and p["detail"]], dropped):
        pass
    # 3. Older events, then (the last resort) whole pods; newest events and first pods kept.
    events: list[dict[str, Any]] = record["events"]
    while record_size(record) > budget and events:
        cut = max(1, len(events) // 4)
        del events[:cut]
        dropped["events"] += cut
    while record_size(record) > budget and len(pods) > 1:
        cut = max(1, (len(pods) - 1) // 4)
        compact_tail = [i for i in range(len(pods)) if not pods[i]["failed"]][-cut:] or list(range(len(pods)))[-cut:]
        for i in sorted(compact_tail, reverse=True):
            del pods[i]
        dropped["pods"] += len(compact_tail)
    notes: list[str] = record["notes"]
    if dropped["log_lines"]:
        notes.append(f"{dropped['log_lines']} log line(s) dropped to stay within {limits.max_bytes} bytes "
                     "(oldest lines first; the failed pods' last)")
    if dropped["pods_detail"]:
        notes.append(f"{dropped['pods_detail']} pod(s) listed without detail (beyond the first "
                     f"{limits.pods_per_task} of each task; failed pods kept first) to stay within {limits.max_bytes} bytes")
    if dropped["events"]:
        notes.append(f"{dropped['events']} older event(s) dropped")
    if dropped["pods"]:
        notes.append(f"{dropped['pods']} pod(s) left out entirely to stay within {limits.max_bytes} bytes")


# --- the Markdown summary
