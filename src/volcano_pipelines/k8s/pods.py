"""Pods, events and logs of a job: the reads a failure report and a scheduling hint need, and
the watch that catches failed pods before Volcano deletes them. Each of these is a source of
hints, not of the result: a refusal is reported once (naming the verb and resource) and
recorded as missing information, never swallowed."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.errors import Forbidden, KubeError, NotFound, from_exception
from volcano_pipelines.k8s.watch import list_raw, watch_collection
from volcano_pipelines.labels import VOLCANO_JOB_NAME_LABEL

__all__ = ["DEFAULT_CONTAINER_ANNOTATION", "FailedPodWatcher", "MissingInfo", "default_container", "job_events",
           "job_pods", "pod_being_deleted", "pod_metadata", "pod_log_tail", "read_log_tail", "share_strings", "slim_pod"]

log = logging.getLogger(__name__)
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
LOG_READ_SECONDS = 10
# A failed pod's log read again after an error other than "gone" (a loaded kubelet, a dropped
# connection), while a restart's deletion may not have reached it yet.
LOG_READ_TRIES = 3
LOG_RETRY_SECONDS = 0.25


Obj = dict[str, Any]


class MissingInfo:
    """What a step could not find out because a permission was refused: warned once per
    (verb, resource), listed in the step's result."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: dict[tuple[str, str], str] = {}

    def denied(self, verb: str, resource: str, missing: str) -> None:
        with self._lock:
            if (verb, resource) in self._notes:
                return
            note = f"{missing} (permission to {verb} {resource} denied)"
            self._notes[(verb, resource)] = note
        log.warning("permission to %s %s denied: %s is not available; grant the step's ServiceAccount "
                    "'%s' on '%s'", verb, resource, missing, verb, resource)

    def notes(self) -> list[str]:
        with self._lock:
            return list(self._notes.values())


def slim_pod(pod: Obj) -> Obj:
    """What the step reads of a pod: its metadata (without managedFields), node, containers'
    names and images, and status. A pod of a training job is about 22 KB of JSON, most of it
    the entry point's script in every container; this is about 2 KB (measured at 11,000 pods),
    its short strings shared (`share_strings`)."""
    spec = pod.get("spec") or {}
    kept: Obj = {"nodeName": spec["nodeName"]} if spec.get("nodeName") else {}
    for key in ("initContainers", "containers"):
        if spec.get(key):
            kept[key] = [{k: c[k] for k in ("name", "image") if k in c} for c in spec[key]]
    meta = {k: v for k, v in (pod.get("metadata") or {}).items() if k != "managedFields"}
    shared: Obj = share_strings({"metadata": meta, "spec": kept, "status": pod.get("status") or {}})
    return shared


# Strings up to this long are shared between objects (`share_strings`): label and annotation values,
# timestamps, phases, reasons, names of nodes and images; not log-sized messages.
_SHARED_CHARS = 64


def share_strings(value: Any) -> Any:
    """`value` rebuilt with its short strings (and every key) interned: the pods of one job
    (and their events) repeat the same values thousands of times (each page of a list is parsed on its own, so
    nothing is shared across pages). At 11,000 pods one copy of each takes the slim pods from
    about 116 MB to 79 (measured with a kwok pod; 0.3 s more CPU in all)."""
    if isinstance(value, dict):
        return {sys.intern(k): share_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [share_strings(v) for v in value]
    if isinstance(value, str) and len(value) <= _SHARED_CHARS:
        return sys.intern(value)
    return value


def job_pods(cluster: Cluster, namespace: str, job_name: str) -> list[Obj]:
    """Every pod of the job, slim (`slim_pod`), read page by page."""
    pods, _ = cluster.call(
        f"list pods of job {namespace}/{job_name}",
        lambda: list_raw(cluster.core.list_namespaced_pod, (namespace,), slim_pod,
                         label_selector=f"{VOLCANO_JOB_NAME_LABEL}={job_name}"),
    )
    return pods


def _listed_pod(cluster: Cluster, namespace: str, name: str) -> Any | None:
    """Pod `name` as the API returns it, read with the `list` on pods a step has anyway (a
    field selector, not a `get`); None when there is none. Raises what the call raises."""
    pods = cluster.call(f"look up pod {namespace}/{name}",
                        lambda: cluster.core.list_namespaced_pod(namespace, field_selector=f"metadata.name={name}",
                                                                 _request_timeout=10))
    return pods.items[0] if pods.items else None


def pod_object(cluster: Cluster, namespace: str, name: str) -> Obj | None:
    """Pod `name` as a dict (read with `list`, as `_listed_pod`); None when there is none.
    Raises what the call raises."""
    pod = _listed_pod(cluster, namespace, name)
    return None if pod is None else cluster.to_dict(pod)


def pod_being_deleted(cluster: Cluster, namespace: str, name: str) -> bool:
    """Whether pod `name` is being deleted (deletionTimestamp set). False when it cannot be
    read: the caller then does what it does for any cancel."""
    try:
        pod = _listed_pod(cluster, namespace, name)
    except Exception as err:  # noqa: BLE001 - a hint only: the cancel goes on either way
        log.warning("cannot tell whether pod %s/%s is being deleted: %s", namespace, name, err)
        return False
    return pod is not None and pod.metadata.deletion_timestamp is not None


def pod_metadata(cluster: Cluster, namespace: str, name: str) -> Obj | None:
    """The metadata of pod `name`. None when it cannot be read or does not exist (logged):
    a hint only, the caller goes on without it."""
    try:
        pod = _listed_pod(cluster, namespace, name)
    except Exception as err:  # noqa: BLE001 - a hint only
        log.warning("cannot read pod %s/%s: %s", namespace, name, err)
        return None
    if pod is None:
        log.warning("pod %s/%s not found", namespace, name)
        return None
    return cluster.to_dict(pod).get("metadata") or {}


def job_events(cluster: Cluster, namespace: str, involved_name: str, missing: MissingInfo) -> list[Obj]:
    try:
        events = cluster.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={involved_name}")
        return [cluster.to_dict(e) for e in events.items]
    except Exception as err:  # noqa: BLE001 - typed below; a blip only delays the hint
        if isinstance(from_exception(err, "list events"), Forbidden):
            missing.denied("list", "events", "scheduling warnings from events")
        else:
            log.debug("cannot list events for %s/%s: %s", namespace, involved_name, err)
        return []


def default_container(pod: Obj) -> str | None:
    """The container whose log `kubectl logs POD` shows: the one the pod's
    `kubectl.kubernetes.io/default-container` annotation names (Istio's injector sets it to the
    application's), else the first. Named explicitly: the API refuses a log read without a
    container once a sidecar makes two."""
    named = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name")]
    if named and named in containers:
        return str(named)
    return containers[0] if containers else None


def read_log_tail(cluster: Cluster, namespace: str, pod: str, lines: int, container: str | None = None) -> str | None:
    """The last lines of a pod's log (of `container`, else the API's default), None when it is
    empty; a read that fails raises its typed error (Forbidden, NotFound: the pod is gone, ...)."""
    extra = {"container": container} if container else {}
    try:
        text = cluster.core.read_namespaced_pod_log(pod, namespace, tail_lines=lines,
                                                    _request_timeout=LOG_READ_SECONDS, **extra)
    except Exception as err:  # typed here, for the callers to decide
        raise from_exception(err, "read pod log") from err
    return text or None


def pod_log_tail(cluster: Cluster, namespace: str, pod: str, lines: int, missing: MissingInfo,
                 container: str | None = None) -> str | None:
    """read_log_tail where the API serves logs (not with fake kubelets), else None: logs are a
    bonus, a report stands without them (a refused read is noted in `missing`)."""
    try:
        return read_log_tail(cluster, namespace, pod, lines, container)
    except KubeError as err:
        if isinstance(err, Forbidden):
            missing.denied("get", "pods/log", "the failed pod's last log lines")
        else:
            log.debug("no logs for pod %s/%s: %s", namespace, pod, err)
        return None


class FailedPodWatcher:
    """Follows the job's pods as they change and keeps the last state of each (a post-mortem
    lists pods Volcano has already deleted), and collects those that end badly, as they do:
    phase Failed, a DisruptionTarget condition (evicted, preempted, lost with a node), or
    deleted while the job did not stop them. Volcano deletes a failed pod as soon as it restarts
    or ends the job (and a kubelet removes it quickly), so a list taken when the job status
    says "failed" can come too late; an evicted pod may never reach phase Failed at all. One
    watch stream whatever the number of pods; the first few failures also get their last log
    lines while the pod still exists."""

    LOGGED_FAILURES = 3
    # Pods remembered at most (a job restarted many times makes new pods each time).
    KEPT_PODS = 2000

    def __init__(self, cluster: Cluster, namespace: str, job_name: str, log_lines: int, missing: MissingInfo) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.job_name = job_name
        self.log_lines = log_lines
        self.missing = missing
        self._pods: dict[str, Obj] = {}  # uid -> latest state, of pods that ended badly (first seen first)
        self._seen: dict[str, Obj] = {}  # uid -> latest state, every pod
        self._deleted: set[str] = set()
        self._log_tails: dict[str, str] = {}  # pod name -> the first failure's last lines
        self._kept_logs: dict[str, dict[str, str]] = {}  # uid -> container -> the same lines
        self._lost_logs: dict[str, str] = {}  # uid -> why its lines could not be kept
        self._log_asked: set[str] = set()  # uids whose log is read or being read
        # One short-lived thread per log read: pods that fail together (a restart follows at
        # once and deletes them) are all read before they go, and the watch is never held up.
        self._log_readers: list[threading.Thread] = []
        self._logged = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name=f"failed-pods-{job_name}", daemon=True)

    def __enter__(self) -> FailedPodWatcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopped.set()
        stream = self._stream
        if stream is not None:
            stream.stop()
        # The stream returns at its next event or window end; don't hold the step for it.
        self._thread.join(timeout=1.0)

    def failed_pods(self) -> list[Obj]:
        """Pods that ended badly so far, in the order they did, each in its latest state."""
        with self._lock:
            return list(self._pods.values())

    def seen_pods(self) -> list[Obj]:
        """Every pod seen, in its latest state (deleted ones too: see deleted_uids)."""
        with self._lock:
            return list(self._seen.values())

    def deleted_uids(self) -> set[str]:
        with self._lock:
            return set(self._deleted)

    def log_tail(self, pod_name: str) -> str | None:
        self._wait_for_log_readers()
        with self._lock:
            return self._log_tails.get(pod_name)

    def kept_logs(self) -> dict[str, dict[str, str]]:
        """The last log lines read from failed pods while they existed, by pod uid then
        container: a restart deletes the pod and its log with it, and a post-mortem written
        afterwards still shows why the pod failed."""
        self._wait_for_log_readers()
        with self._lock:
            return {uid: dict(logs) for uid, logs in self._kept_logs.items()}

    def _wait_for_log_readers(self) -> None:
        """Until the reads started so far are done: bounded, each read has its own timeout."""
        with self._lock:
            readers = list(self._log_readers)
        for reader in readers:
            reader.join(timeout=LOG_READ_SECONDS + 1)

    def _run(self) -> None:
        # The one reconnecting watch (k8s/watch.py): a list, then the changes from its version
        # on, resumed after a drop, so a pod deleted between two windows is still seen deleted.
        events = watch_collection(
            self.cluster, f"pods of job {self.namespace}/{self.job_name}", self.cluster.core.list_namespaced_pod,
            (self.namespace,), f"{VOLCANO_JOB_NAME_LABEL}={self.job_name}",
            stopped=self._stopped.is_set, pause=self._stopped.wait, started=self._started, project=slim_pod)
        try:
            for event in events:
                if event is not None:
                    self._record(event[1], deleted=event[0] == "DELETED")
        except Forbidden:
            # Retrying cannot help: say so once, and fall back to the end-of-run list.
            self.missing.denied("watch", "pods", "failed pods deleted before the job ended")
        except Exception as err:  # noqa: BLE001 - the watch is a bonus: the end-of-run list stands without it
            log.warning("pod watch for %s/%s ended: %s", self.namespace, self.job_name, err)

    def _started(self, watcher: Any) -> None:
        self._stream = watcher
        if self._stopped.is_set():  # stopped between two windows: end this one at once
            watcher.stop()

    @staticmethod
    def _ended_badly(pod: Obj, deleted: bool) -> bool:
        status = pod.get("status") or {}
        if status.get("phase") == "Failed" or status.get("reason") == "Evicted":
            return True
        if any(c.get("type") == "DisruptionTarget" and c.get("status") == "True" for c in status.get("conditions") or []):
            return True
        # Deleted before it finished: by Volcano (a restart, the job ending: the waiter tells
        # those apart by the job's phase) or by someone else.
        return (deleted or bool((pod.get("metadata") or {}).get("deletionTimestamp"))) and status.get("phase") != "Succeeded"

    def _record(self, pod: Obj, deleted: bool = False) -> None:
        uid = pod["metadata"]["uid"]
        fetch_log = False
        with self._lock:
            if uid in self._seen or len(self._seen) < self.KEPT_PODS:
                self._seen[uid] = pod
            if deleted:
                self._deleted.add(uid)
            if uid in self._pods or self._ended_badly(pod, deleted):
                self._pods[uid] = pod
            if (not deleted and self.log_lines > 0 and (pod.get("status") or {}).get("phase") == "Failed"
                    and uid not in self._log_asked and self._logged < self.LOGGED_FAILURES):
                self._logged += 1
                self._log_asked.add(uid)
                fetch_log = True
        if fetch_log:
            reader = threading.Thread(target=self._keep_log, args=(pod["metadata"]["name"], uid, default_container(pod)),
                                      name=f"failed-pod-log-{uid[:8]}", daemon=True)
            # Started and listed as one step: a waiter (log_tail, kept_logs, in another thread) never
            # sees a reader that is not started yet (joining one raises).
            with self._lock:
                reader.start()
                self._log_readers.append(reader)

    def _keep_log(self, name: str, uid: str, container: str | None) -> None:
        tail, error = None, None
        for attempt in range(LOG_READ_TRIES):
            if attempt:
                time.sleep(LOG_RETRY_SECONDS)
            try:
                tail = read_log_tail(self.cluster, self.namespace, name, self.log_lines, container)
                error = None if tail else "the log was empty"
                break
            except KubeError as kind:  # logs are a bonus; the failure report stands without them
                if isinstance(kind, Forbidden):
                    self.missing.denied("get", "pods/log", "the failed pod's last log lines")
                    return
                # Gone (the restart's deletion came first): no second try can read it.
                error = "the pod was gone before its log could be read" if isinstance(kind, NotFound) else str(kind)
                if isinstance(kind, NotFound):
                    break
        with self._lock:
            if tail:
                self._log_tails.setdefault(name, tail)  # a name's first failure (a restart reuses names)
                if container:
                    self._kept_logs[uid] = {container: tail}
            elif error:
                self._lost_logs[uid] = f"pod {name}: last log lines not kept ({error})"

    def lost_logs(self) -> dict[str, str]:
        """Failed pods whose last log lines could not be read while they existed, by uid: why
        (a post-mortem says so instead of showing an empty log as if the pod printed nothing)."""
        self._wait_for_log_readers()
        with self._lock:
            return dict(self._lost_logs)
