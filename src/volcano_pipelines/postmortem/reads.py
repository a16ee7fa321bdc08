"""The reads behind a job's post-mortem record (postmortem/record.py builds it): the job, its
pods now, the namespace's events about the job, its PodGroup and its pods, and the last log
lines of chosen containers. Bounded: one job read, one pod list, paged event lists (at most
EVENT_PAGES pages), log reads in a small pool with a per-read timeout, and no more log reads
from a node whose kubelet did not answer once. What cannot be read becomes a note, never an
error: a post-mortem is written on the way out and must not fail the step."""

from __future__ import annotations

import json

import logging
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from volcano_pipelines.k8s import volcano as k8s_volcano
from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.errors import Forbidden, NotFound, from_exception
from volcano_pipelines.k8s.pods import MissingInfo, job_pods, share_strings

__all__ = ["Collected", "EVENT_PAGES", "read_logs", "read_state"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]
EVENT_PAGE = 500
EVENT_PAGES = 20
LOG_READ_SECONDS = 10
LOG_READERS = 8


@dataclass
class Collected:
    job: Obj | None
    pods: list[Obj] = field(default_factory=list)  # every pod: listed now, then those seen before and gone
    deleted: list[str] = field(default_factory=list)  # uids of pods seen before but no longer listed
    events: list[Obj] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _events(cluster: Cluster, namespace: str, names: set[str], notes: list[str], missing: MissingInfo) -> list[Obj]:
    """The events about `names`, from one paged list of the namespace's events (a per-object
    field selector would cost one request per pod), as plain JSON: at 11,001 pods the typed
    client's model objects of 10,000 events took most of the collection's memory."""
    out: list[Obj] = []
    token: str | None = None
    for _ in range(EVENT_PAGES):
        try:
            kwargs: dict[str, Any] = {"limit": EVENT_PAGE, "_request_timeout": 30, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = json.loads(cluster.core.list_namespaced_event(namespace, **kwargs).data)
        except Exception as err:  # noqa: BLE001 - typed below; a record without events still stands
            if isinstance(from_exception(err, "list events"), Forbidden):
                missing.denied("list", "events", "the job's and pods' events")
            else:
                notes.append(f"events not read: {err}")
            return out
        out += [share_strings(_without_managed_fields(event)) for event in page.get("items") or []
                if ((event.get("involvedObject") or {}).get("name")) in names]
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            return out
    notes.append(f"events: only the first {EVENT_PAGE * EVENT_PAGES} events of namespace {namespace} were read")
    return out


def _without_managed_fields(event: Obj) -> Obj:
    meta = event.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        event = {**event, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return event


def read_state(cluster: Cluster, namespace: str, name: str, *, seen_pods: Sequence[Obj] = (),
               job: Obj | None = None, missing: MissingInfo | None = None) -> Collected:
    """The job (read again unless given), its pods (those listed now, then those in
    `seen_pods` that are gone: a failed-pod watch keeps them) and their events."""
    missing = missing or MissingInfo()
    notes: list[str] = []
    if job is None:
        try:
            job = k8s_volcano.get_job(cluster, namespace, name)
        except Exception as err:  # noqa: BLE001 - the record says what it could not read
            notes.append(f"job {namespace}/{name} not read: {err}")
    try:
        pods = job_pods(cluster, namespace, name)
    except Exception as err:  # noqa: BLE001 - as above
        if isinstance(err, Forbidden):
            missing.denied("list", "pods", "the job's pods")
        else:
            notes.append(f"pods not listed: {err}")
        pods = []
    listed = {(p.get("metadata") or {}).get("uid") for p in pods}
    gone = [p for p in seen_pods if (p.get("metadata") or {}).get("uid") not in listed]
    # The newest state of a pod seen more than once: later entries win.
    by_uid: dict[str, Obj] = {}
    for p in gone:
        by_uid[(p.get("metadata") or {}).get("uid") or ""] = p
    names = {name}
    if job is not None and (job.get("metadata") or {}).get("uid"):
        names.add(f"{name}-{job['metadata']['uid']}")  # its PodGroup
    all_pods = pods + list(by_uid.values())
    names.update((p.get("metadata") or {}).get("name") or "" for p in all_pods)
    events = _events(cluster, namespace, names, notes, missing)
    return Collected(job=job, pods=all_pods, deleted=list(by_uid), events=events, notes=notes + missing.notes())


def _containers(pod: Mapping[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    return [c.get("name") for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])] if c.get("name")]


def read_logs(cluster: Cluster, namespace: str, pods: Iterable[Mapping[str, Any]], lines: int, line_chars: int,
              notes: list[str], missing: MissingInfo | None = None) -> dict[str, dict[str, str | None]]:
    """The last `lines` of every container of `pods` that still exist (a deleted pod's log is
    gone with it), read in parallel; a node whose kubelet did not answer is not asked again."""
    missing = missing or MissingInfo()
    wanted = [(p["metadata"]["name"], c, (p.get("spec") or {}).get("nodeName"))
              for p in pods for c in _containers(p)]
    out: dict[str, dict[str, str | None]] = {}
    dead_nodes: set[str] = set()
    refused = False

    def one(item: tuple[str, str, str | None]) -> tuple[str, str, str | None]:
        nonlocal refused
        pod, container, node = item
        if refused or (node and node in dead_nodes):
            return pod, container, None
        try:
            text = cluster.core.read_namespaced_pod_log(pod, namespace, container=container, tail_lines=lines,
                                                        limit_bytes=max(1, lines) * (line_chars + 1) * 2,
                                                        _request_timeout=LOG_READ_SECONDS)
            return pod, container, text or None
        except Exception as err:  # noqa: BLE001 - typed below; logs are a part, not the record
            typed = from_exception(err, "read pod log")
            if isinstance(typed, Forbidden):
                refused = True
                missing.denied("get", "pods/log", "the pods' last log lines")
            elif not isinstance(typed, NotFound) and node:
                if node not in dead_nodes:
                    dead_nodes.add(node)
                    notes.append(f"logs from node {node} not available: {str(typed)[:300]}")
            return pod, container, None

    if lines > 0 and wanted:
        with ThreadPoolExecutor(max_workers=min(LOG_READERS, len(wanted))) as pool:
            for pod, container, text in pool.map(one, wanted):
                out.setdefault(pod, {})[container] = text
    for note in missing.notes():
        if note not in notes:
            notes.append(note)
    return out
