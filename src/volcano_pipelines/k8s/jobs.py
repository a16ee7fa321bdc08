"""The thin I/O layer for Volcano Jobs: idempotent create, a watch that survives API server
restarts and `410 Gone`, abort / delete, and the few reads a failure report needs. Every
request here is per job, never per pod, so a waiting step costs the same for 3 pods or 300."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import watch
from kubernetes.client.rest import ApiException

from volcano_pipelines.errors import ClusterError, InputError
from volcano_pipelines.k8s.client import Cluster, api_error, is_transient
from volcano_pipelines.volcano.common import RUN_LABEL, STEP_LABEL, VOLCANO_JOB_NAME_LABEL

log = logging.getLogger(__name__)

GROUP = "batch.volcano.sh"
VERSION = "v1alpha1"
PLURAL = "jobs"
SCHEDULING_GROUP = "scheduling.volcano.sh"
SCHEDULING_VERSION = "v1beta1"
BUS_GROUP = "bus.volcano.sh"
BUS_VERSION = "v1alpha1"

# How long one watch request stays open; each return is a chance to look at the deadline
# and the PodGroup. Short enough to notice a silently dead connection.
WATCH_WINDOW_SECONDS = 20
MAX_BACKOFF_SECONDS = 10.0


def retrying(action: str, cluster: Cluster, call: Callable[[], Any], *, attempts: int = 6) -> Any:
    """Run one API call, retrying transient failures (restarts, 429/5xx) with backoff."""
    delay = 0.5
    for attempt in range(attempts):
        try:
            return call()
        except Exception as err:  # noqa: BLE001 - classified right below
            if not is_transient(err) or attempt == attempts - 1:
                raise api_error(err, action, cluster) from err
            log.warning("API server not answering while trying to %s (%s); retrying in %.1fs", action, err, delay)
            time.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_SECONDS)
    raise AssertionError("unreachable")


def get_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return retrying(
            f"read job {namespace}/{name}",
            cluster,
            lambda: cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
        )
    except ClusterError as err:
        if isinstance(err.__cause__, ApiException) and err.__cause__.status == 404:
            return None
        raise


def find_run_job(cluster: Cluster, namespace: str, run_id: str, step: str) -> dict[str, Any] | None:
    listing = retrying(
        f"list jobs of run {run_id} in {namespace}",
        cluster,
        lambda: cluster.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, label_selector=f"{RUN_LABEL}={run_id},{STEP_LABEL}={step}"
        ),
    )
    items = listing.get("items") or []
    return items[0] if items else None


def create_or_attach(cluster: Cluster, job: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Create the job, or return the one this run already created (same run label).
    Returns (job, created)."""
    meta = job["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    run_id = meta["labels"].get(RUN_LABEL)
    step = meta["labels"][STEP_LABEL]
    if run_id:
        existing = find_run_job(cluster, namespace, run_id, step)
        if existing is not None:
            return existing, False
    check_queue(cluster, job["spec"]["queue"])
    delay = 0.5
    for attempt in range(6):
        try:
            return cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job), True
        except Exception as err:  # noqa: BLE001 - classified right below
            if isinstance(err, ApiException) and err.status == 409:
                break
            if not is_transient(err) or attempt == 5:
                raise api_error(err, f"create job {namespace}/{name}", cluster) from err
            log.warning("API server not answering while creating job %s/%s (%s); retrying", namespace, name, err)
        time.sleep(delay)
        delay = min(delay * 2, MAX_BACKOFF_SECONDS)
        # The create may have gone through before the connection broke.
        found = find_run_job(cluster, namespace, run_id, step) if run_id else None
        if found is not None:
            return found, False
    existing = get_job(cluster, namespace, name)
    owner_run = ((existing or {}).get("metadata", {}).get("labels") or {}).get(RUN_LABEL)
    if existing is not None and run_id and owner_run == run_id:
        return existing, False
    raise InputError(
        "job.name",
        name,
        f"a name not already used in namespace {namespace}: job {name} exists"
        + (f" and belongs to run {owner_run!r}" if owner_run else "")
        + "; choose another name, delete it, or pass the same run id to attach to it",
    )


def delete_job(cluster: Cluster, namespace: str, name: str) -> None:
    try:
        retrying(
            f"delete job {namespace}/{name}",
            cluster,
            lambda: cluster.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background"
            ),
        )
    except ClusterError as err:
        if isinstance(err.__cause__, ApiException) and err.__cause__.status == 404:
            return
        raise


def send_command(cluster: Cluster, job: dict[str, Any], action: str, reason: str) -> None:
    """Ask Volcano's job controller to act on the job through a bus Command (the controller
    consumes and deletes it)."""
    meta = job["metadata"]
    target = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}
    command = {
        "apiVersion": f"{BUS_GROUP}/{BUS_VERSION}",
        "kind": "Command",
        "metadata": {
            "generateName": f"{meta['name'][:40]}-{action.lower()}-",
            "namespace": meta["namespace"],
            "ownerReferences": [target],
        },
        "action": action,
        "target": target,
        "reason": reason,
        "message": "sent by volcano-pipelines",
    }
    retrying(
        f"send {action} to job {meta['namespace']}/{meta['name']}",
        cluster,
        lambda: cluster.custom.create_namespaced_custom_object(BUS_GROUP, BUS_VERSION, meta["namespace"], "commands", command),
    )


def abort_job(cluster: Cluster, job: dict[str, Any]) -> str:
    """Abort (pods deleted, job kept as Aborted for the record); delete the job where
    Commands are not available. Returns what was done: 'aborted' or 'deleted'."""
    try:
        send_command(cluster, job, "AbortJob", "StepTimeout")
        return "aborted"
    except ClusterError as err:
        meta = job["metadata"]
        log.warning("cannot abort through a Volcano Command (%s); deleting the job instead", err)
        delete_job(cluster, meta["namespace"], meta["name"])
        return "deleted"


def check_queue(cluster: Cluster, queue: str) -> None:
    """What Volcano's webhook checks and a cluster without it would not: the queue exists, is
    Open and is a leaf (jobs in a missing or closed queue wait forever). Skipped, with a
    warning, when the step may not read queues."""
    try:
        found = cluster.custom.get_cluster_custom_object(SCHEDULING_GROUP, SCHEDULING_VERSION, "queues", queue)
    except ApiException as err:
        if err.status == 404:
            names = _queue_names(cluster)
            raise InputError("job.queue", queue, "an existing Volcano queue" + (f": one of {', '.join(names)}" if names else "")) from None
        if err.status in (401, 403):
            log.warning("cannot read Volcano queue %s (HTTP %s); not checking it", queue, err.status)
            return
        raise api_error(err, f"read queue {queue}", cluster) from err
    state = (found.get("status") or {}).get("state")
    if state and state != "Open":
        raise InputError("job.queue", queue, f"an Open queue (queue {queue} is {state})")
    if queue == "root":
        raise InputError("job.queue", queue, "a leaf queue, not the root of the hierarchy")


def _queue_names(cluster: Cluster) -> list[str]:
    try:
        listing = cluster.custom.list_cluster_custom_object(SCHEDULING_GROUP, SCHEDULING_VERSION, "queues")
        return sorted(q["metadata"]["name"] for q in listing.get("items") or [])
    except Exception:  # noqa: BLE001 - only decorates the error message
        return []


def get_podgroup(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return cluster.custom.get_namespaced_custom_object(SCHEDULING_GROUP, SCHEDULING_VERSION, namespace, "podgroups", name)
    except Exception as err:  # noqa: BLE001 - a missing PodGroup or a blip only delays the hint
        log.debug("cannot read podgroup %s/%s: %s", namespace, name, err)
        return None


def job_events(cluster: Cluster, namespace: str, involved_name: str) -> list[dict[str, Any]]:
    try:
        events = cluster.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={involved_name}")
        return [cluster.to_dict(e) for e in events.items]
    except Exception as err:  # noqa: BLE001
        log.debug("cannot list events for %s/%s: %s", namespace, involved_name, err)
        return []


def job_pods(cluster: Cluster, namespace: str, job_name: str) -> list[dict[str, Any]]:
    pods = retrying(
        f"list pods of job {namespace}/{job_name}",
        cluster,
        lambda: cluster.core.list_namespaced_pod(namespace, label_selector=f"{VOLCANO_JOB_NAME_LABEL}={job_name}"),
    )
    return [cluster.to_dict(p) for p in pods.items]


def pod_log_tail(cluster: Cluster, namespace: str, pod: str, lines: int = 20) -> str | None:
    """The last lines of a pod's log where the API serves them (not with fake kubelets)."""
    try:
        text = cluster.core.read_namespaced_pod_log(pod, namespace, tail_lines=lines, _request_timeout=10)
        return text or None
    except Exception as err:  # noqa: BLE001 - logs are a bonus; the failure report stands without them
        log.debug("no logs for pod %s/%s: %s", namespace, pod, err)
        return None


def watch_job(
    cluster: Cluster,
    namespace: str,
    name: str,
    window: Callable[[], int] = lambda: WATCH_WINDOW_SECONDS,
    resource_version: str | None = None,
) -> Iterator[dict[str, Any] | None]:
    """Yields the job every time it changes, and None at least every `window()` seconds
    (a tick for deadlines and hints). Survives connection loss and `410 Gone` by re-reading
    the job and resuming from its resourceVersion. Ends when the job is deleted.
    `resource_version` resumes an earlier watch (None: start from a fresh read)."""
    delay = 0.5
    while True:
        if resource_version is None:
            job = get_job(cluster, namespace, name)
            if job is None:
                return
            resource_version = job["metadata"]["resourceVersion"]
            yield job
        stream = watch.Watch()
        seconds = max(1, int(window()))
        try:
            for event in stream.stream(
                cluster.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _request_timeout=seconds + 10,
            ):
                kind = event["type"]
                obj = event["object"]
                if kind == "ERROR":
                    if (obj or {}).get("code") == 410:
                        log.info("watch of job %s/%s expired (410 Gone); re-reading it", namespace, name)
                        resource_version = None
                        break
                    raise ApiException(status=(obj or {}).get("code", 500), reason=str((obj or {}).get("message")))
                resource_version = obj["metadata"]["resourceVersion"]
                if kind == "DELETED":
                    return
                if kind in ("ADDED", "MODIFIED"):
                    yield obj
            delay = 0.5
            yield None
        except ApiException as err:
            if err.status == 410:
                log.info("watch of job %s/%s expired (410 Gone); re-reading it", namespace, name)
                resource_version = None
                continue
            if not is_transient(err):
                raise api_error(err, f"watch job {namespace}/{name}", cluster) from err
            log.warning("watch of job %s/%s interrupted (%s); resuming", namespace, name, err.status)
            yield None
            time.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_SECONDS)
        except Exception as err:  # noqa: BLE001
            if not is_transient(err):
                raise
            log.warning("watch of job %s/%s interrupted (%s); resuming", namespace, name, type(err).__name__)
            yield None
            time.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_SECONDS)
        finally:
            stream.stop()


class FailedPodWatcher:
    """Collects the job's pods that reach phase Failed, as they fail. Volcano deletes a failed
    pod as soon as it restarts or ends the job (and a kubelet removes it quickly), so a list
    taken when the job status says "failed" can come too late. One watch stream, filtered
    by the API server to failed pods, whatever the number of pods; the first few failures
    also get their last log lines while the pod still exists."""

    LOGGED_FAILURES = 3

    def __init__(self, cluster: Cluster, namespace: str, job_name: str, log_lines: int) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.job_name = job_name
        self.log_lines = log_lines
        self._pods: dict[str, dict[str, Any]] = {}
        self._log_tails: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"failed-pods-{job_name}", daemon=True)

    def __enter__(self) -> FailedPodWatcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopped.set()

    def failed_pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._pods.values())

    def log_tail(self, pod_name: str) -> str | None:
        with self._lock:
            return self._log_tails.get(pod_name)

    def _run(self) -> None:
        delay = 0.5
        while not self._stopped.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(
                    self.cluster.core.list_namespaced_pod,
                    self.namespace,
                    label_selector=f"{VOLCANO_JOB_NAME_LABEL}={self.job_name}",
                    field_selector="status.phase=Failed",
                    timeout_seconds=WATCH_WINDOW_SECONDS,
                    _request_timeout=WATCH_WINDOW_SECONDS + 10,
                ):
                    if self._stopped.is_set():
                        break
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._record(self.cluster.to_dict(event["object"]))
                delay = 0.5
            except Exception as err:  # noqa: BLE001 - a hint source: keep trying quietly
                log.debug("failed-pod watch for %s/%s interrupted: %s", self.namespace, self.job_name, err)
                self._stopped.wait(delay)
                delay = min(delay * 2, MAX_BACKOFF_SECONDS)
            finally:
                stream.stop()

    def _record(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            if uid in self._pods:
                return
            first_ones = len(self._pods) < self.LOGGED_FAILURES
            self._pods[uid] = pod
        if first_ones and self.log_lines > 0:
            name = pod["metadata"]["name"]
            tail = pod_log_tail(self.cluster, self.namespace, name, self.log_lines)
            if tail:
                with self._lock:
                    self._log_tails[name] = tail
