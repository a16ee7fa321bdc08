"""Volcano's API through the generic client: Jobs (idempotent create, watch, delete), bus
Commands (abort, sync), PodGroups and Queues. Every request is per job, never per pod, so a
waiting step costs the same for 3 pods or 300."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, cast

from volcano_pipelines.errors import InputError
from volcano_pipelines.k8s import apps
from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.errors import Conflict, Forbidden, KubeError, NotFound, from_exception
from volcano_pipelines.k8s.watch import WATCH_WINDOW_SECONDS, watch_named
from volcano_pipelines.labels import RUN_LABEL, STEP_LABEL, run_selector

__all__ = [
    "abort_job",
    "check_api",
    "check_queue",
    "create_or_attach",
    "delete_job",
    "find_run_job",
    "get_job",
    "get_podgroup",
    "patch_job_annotations",
    "send_command",
    "watch_job",
]

log = logging.getLogger(__name__)

GROUP = "batch.volcano.sh"
VERSION = "v1alpha1"
PLURAL = "jobs"
SCHEDULING_GROUP = "scheduling.volcano.sh"
SCHEDULING_VERSION = "v1beta1"
BUS_GROUP = "bus.volcano.sh"
BUS_VERSION = "v1alpha1"

Obj = dict[str, Any]


def get_job(cluster: Cluster, namespace: str, name: str) -> Obj | None:
    try:
        return cast(Obj, cluster.call(
            f"read job {namespace}/{name}",
            lambda: cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
        ))
    except NotFound:
        return None


def check_api(cluster: Cluster) -> None:
    """A 404 means "no such job" only from an API server that serves Volcano Jobs: anything
    else (a wrong URL, a cluster without Volcano) is a cluster problem, not a missing job."""
    try:
        cluster.call("discover Volcano's batch API", lambda: cluster.api.call_api(
            f"/apis/{GROUP}/{VERSION}", "GET", auth_settings=["BearerToken"], response_type="object",
            _return_http_data_only=True))
    except NotFound:
        raise NotFound(f"{cluster.host} does not serve {GROUP}/{VERSION}: not a Kubernetes API server with "
                       "Volcano's CRDs installed", status=404, action="discover Volcano's batch API") from None


def find_run_job(cluster: Cluster, namespace: str, run_id: str, step: str) -> Obj | None:
    listing = cluster.call(
        f"list jobs of run {run_id} in {namespace}",
        lambda: cluster.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, label_selector=run_selector(run_id, step)
        ),
    )
    items = listing.get("items") or []
    return items[0] if items else None


def create_or_attach(cluster: Cluster, job: Obj) -> tuple[Obj, bool]:
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
    attempts = 0

    def create() -> Obj:
        nonlocal attempts
        attempts += 1
        if attempts > 1 and run_id:
            # A create that timed out may have gone through: attach rather than conflict.
            found = find_run_job(cluster, namespace, run_id, step)
            if found is not None:
                raise _Created(found)
        return cast(Obj, cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job))

    try:
        return cluster.call(f"create job {namespace}/{name}", create), True
    except _Created as done:
        return done.job, False
    except Conflict:
        pass
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


class _Created(Exception):
    """A retried create found the job its earlier attempt made."""

    def __init__(self, job: Obj) -> None:
        super().__init__("created by an earlier attempt")
        self.job = job


def delete_job(cluster: Cluster, namespace: str, name: str) -> None:
    try:
        cluster.call(
            f"delete job {namespace}/{name}",
            lambda: cluster.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background"
            ),
        )
    except NotFound:
        return


def patch_job_annotations(cluster: Cluster, namespace: str, name: str, annotations: dict[str, str]) -> None:
    """Set annotations on a job (a JSON merge patch: only these keys change; the other
    annotations and the spec are left alone), under the client's retry policy."""
    apps.patch(cluster, f"{GROUP}/{VERSION}", "Job", namespace, name, {"metadata": {"annotations": annotations}})


def send_command(cluster: Cluster, job: Obj, action: str, reason: str) -> None:
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
    cluster.call(
        f"send {action} to job {meta['namespace']}/{meta['name']}",
        lambda: cluster.custom.create_namespaced_custom_object(BUS_GROUP, BUS_VERSION, meta["namespace"], "commands", command),
    )


def abort_job(cluster: Cluster, job: Obj, reason: str = "StepTimeout") -> str:
    """Abort (pods deleted, job kept as Aborted for the record); delete the job where
    Commands are not available. Returns what was done: 'aborted' or 'deleted'."""
    try:
        send_command(cluster, job, "AbortJob", reason)
        return "aborted"
    except KubeError as err:
        meta = job["metadata"]
        log.warning("cannot abort through a Volcano Command (%s); deleting the job instead", err)
        delete_job(cluster, meta["namespace"], meta["name"])
        return "deleted"


# The grant a step needs to check its queue, as manifests/cluster ships it.
QUEUE_GRANT = ("grant the step's ServiceAccount get/list on queues.scheduling.volcano.sh: ClusterRole "
               "vpipe-queue-reader in manifests/cluster, bound per namespace by the overlays' "
               "clusterrolebinding-queues.yaml")


def check_queue(cluster: Cluster, queue: str) -> None:
    """What Volcano's webhook checks and a cluster without it would not: the queue exists, is
    Open and is a leaf (jobs in a missing or closed queue wait forever). Skipped, with a
    warning, when the step may not read queues."""
    try:
        found = cluster.call(
            f"read queue {queue}",
            lambda: cluster.custom.get_cluster_custom_object(SCHEDULING_GROUP, SCHEDULING_VERSION, "queues", queue),
        )
    except NotFound:
        names = _queue_names(cluster)
        raise InputError("job.queue", queue, "an existing Volcano queue" + (f": one of {', '.join(names)}" if names else "")) from None
    except Forbidden as err:
        log.warning("cannot read Volcano queue %s (HTTP %s): not checking that it exists and is Open (%s); a job "
                    "in a missing queue is ended by Volcano without running a pod", queue, err.status, QUEUE_GRANT)
        return
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


def get_podgroup(cluster: Cluster, namespace: str, name: str) -> Obj | None:
    """One read, no retries: a missing PodGroup or a blip only delays a hint. Forbidden is
    raised for the caller to report."""
    try:
        return cast(Obj, cluster.custom.get_namespaced_custom_object(SCHEDULING_GROUP, SCHEDULING_VERSION, namespace,
                                                                     "podgroups", name))
    except Exception as err:
        typed = from_exception(err, f"read podgroup {namespace}/{name}", cluster.host)
        if isinstance(typed, Forbidden):
            raise typed from err
        log.debug("cannot read podgroup %s/%s: %s", namespace, name, err)
        return None


def watch_job(
    cluster: Cluster,
    namespace: str,
    name: str,
    window: Callable[[], float] = lambda: WATCH_WINDOW_SECONDS,
    resource_version: str | None = None,
) -> Iterator[Obj | None]:
    """The job every time it changes, None at least every `window()` seconds; ends when the
    job is deleted (see k8s.watch)."""
    return watch_named(
        cluster,
        f"job {namespace}/{name}",
        lambda: get_job(cluster, namespace, name),
        cluster.custom.list_namespaced_custom_object,
        (GROUP, VERSION, namespace, PLURAL),
        name,
        window,
        resource_version=resource_version,
    )
