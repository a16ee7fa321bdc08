"""Deployments, Services, Ingresses, ConfigMaps, Events and watched collections through the
generic client, as plain dicts: what the lifecycle steps (reap, tensorboard, serve) send and
read. Requests go through `Cluster.call` (one retry policy, typed errors); objects are applied
with server-side apply, so a re-run updates in place and never duplicates.

`Informer` is the one way a step follows many objects: a list, then one watch per
collection resumed from its resourceVersion (re-listed after `410 Gone`), feeding a queue
that the step's loop reads. Nothing here polls object by object."""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from volcano_pipelines.deadline import Deadline
from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.errors import (
    KubeError,
    NotFound,
    from_exception,
)
from volcano_pipelines.k8s.watch import WATCH_WINDOW_SECONDS, reconnecting, watch_named
from volcano_pipelines.objects.rollout import (
    TEMPLATE_HASH_ANNOTATION,
    Rollout,
    new_pod_problem,
    rollout_status,
)

__all__ = [
    "FIELD_MANAGER",
    "Informer",
    "apply",
    "check_all",
    "collection_path",
    "delete",
    "delete_namespace",
    "exists",
    "foreign_objects",
    "get",
    "label_selector_text",
    "list_objects",
    "owner_of",
    "patch",
    "proxy_request",
    "record_event",
    "scale_deployment",
    "wait_for_rollout",
    "watch_deployment",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
FIELD_MANAGER = "vpipe"
EVENT_COMPONENT = "volcano-pipelines"
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

# kind -> (plural, namespaced) for everything the lifecycle steps apply, read or delete.
PLURALS: dict[str, str] = {
    "Deployment": "deployments",
    "Service": "services",
    "Ingress": "ingresses",
    "ConfigMap": "configmaps",
    "Pod": "pods",
    "Job": "jobs",
    "Event": "events",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "InferenceService": "inferenceservices",
    "Namespace": "namespaces",
}


def collection_path(api_version: str, plural: str, namespace: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def _object_path(api_version: str, kind: str, namespace: str | None, name: str) -> str:
    return f"{collection_path(api_version, PLURALS[kind], namespace)}/{name}"


def _raw(cluster: Cluster, method: str, path: str, *, body: Any = None, query: Sequence[tuple[str, Any]] = (),
         content_type: str | None = None, accept: str = "application/json", timeout: float | None = None) -> Any:
    headers = {"Accept": accept}
    if content_type:
        headers["Content-Type"] = content_type
    return cluster.api.call_api(path, method, query_params=list(query), header_params=headers, body=body,
                                auth_settings=["BearerToken"], response_type="object", _return_http_data_only=True,
                                _request_timeout=timeout)


def request(cluster: Cluster, action: str, method: str, path: str, **kwargs: Any) -> Any:
    """One request under the retry policy; errors are typed."""
    return cluster.call(action, lambda: _raw(cluster, method, path, **kwargs))


def get(cluster: Cluster, api_version: str, kind: str, namespace: str | None, name: str) -> Obj | None:
    try:
        return request(cluster, f"read {kind.lower()} {namespace}/{name}", "GET",  # type: ignore[no-any-return]
                       _object_path(api_version, kind, namespace, name))
    except NotFound:
        return None


def exists(cluster: Cluster, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
    return get(cluster, api_version, kind, namespace, name) is not None


def apply(cluster: Cluster, obj: Mapping[str, Any], *, server_dry_run: bool = False) -> Obj:
    """Create or update `obj` in one request (server-side apply, our field manager, forced:
    the step owns what it declares). Fields it declared before and no longer does are
    removed; fields others set (an allocated nodePort, the clusterIP) are kept.
    `server_dry_run`: the API server validates and admits it but stores nothing."""
    meta = obj["metadata"]
    path = _object_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
    query: list[tuple[str, Any]] = [("fieldManager", FIELD_MANAGER), ("force", "true")]
    if server_dry_run:
        query.append(("dryRun", "All"))
    verb = "check" if server_dry_run else "apply"
    return request(cluster, f"{verb} {obj['kind'].lower()} {meta.get('namespace')}/{meta['name']}", "PATCH", path,  # type: ignore[no-any-return]
                   body=dict(obj), query=query, content_type="application/apply-patch+yaml")


def check_all(cluster: Cluster, objs: Sequence[Mapping[str, Any]]) -> None:
    """Every object through the API server's validation (server-side dry run) before any is
    stored: what the server refuses (Invalid: exit 2) leaves nothing half-created."""
    for obj in objs:
        apply(cluster, obj, server_dry_run=True)


def owner_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to an applied object (garbage collection, not blocking deletion)."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": False}


def patch(cluster: Cluster, api_version: str, kind: str, namespace: str, name: str, body: Any, *,
          subresource: str | None = None, json_patch: bool = False) -> Obj:
    """A merge patch (or a JSON patch: a list of operations)."""
    path = _object_path(api_version, kind, namespace, name) + (f"/{subresource}" if subresource else "")
    content = "application/json-patch+json" if json_patch else "application/merge-patch+json"
    what = f"{kind.lower()} {namespace}/{name}" + (f" ({subresource})" if subresource else "")
    return request(cluster, f"patch {what}", "PATCH", path, body=body, content_type=content)  # type: ignore[no-any-return]


def scale_deployment(cluster: Cluster, namespace: str, name: str, replicas: int) -> None:
    """Through the scale subresource: needs only `patch deployments/scale`."""
    patch(cluster, "apps/v1", "Deployment", namespace, name, {"spec": {"replicas": replicas}}, subresource="scale")


def delete(cluster: Cluster, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
    """Delete (dependents in the background); False when it was already gone."""
    try:
        request(cluster, f"delete {kind.lower()} {namespace}/{name}", "DELETE",
                _object_path(api_version, kind, namespace, name), body={"propagationPolicy": "Background"})
        return True
    except NotFound:
        return False


def delete_namespace(cluster: Cluster, name: str) -> bool:
    return delete(cluster, "v1", "Namespace", None, name)


def list_objects(cluster: Cluster, path: str, *, label_selector: str | None = None, field_selector: str | None = None,
                 metadata_only: bool = False, project: Callable[[Obj], Obj] | None = None) -> tuple[list[Obj], str]:
    """Every page of a list: (items, each through `project` as its page comes, resourceVersion
    of the list)."""
    items: list[Obj] = []
    token: str | None = None
    while True:
        query: list[tuple[str, Any]] = [("limit", 500)]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if token:
            query.append(("continue", token))
        page = request(cluster, f"list {path}", "GET", path, query=query,
                       accept=METADATA_ONLY if metadata_only else "application/json")
        items += [project(item) for item in page.get("items") or []] if project else page.get("items") or []
        meta = page.get("metadata") or {}
        token = meta.get("continue")
        if not token:
            return items, str(meta.get("resourceVersion") or "")


def record_event(cluster: Cluster, involved: Mapping[str, Any], reason: str, message: str, *,
                 event_type: str = "Normal", now: datetime | None = None) -> None:
    """A core/v1 Event on `involved` (shown by `kubectl describe`). Failing to record it is
    reported, never fatal: the action it describes already happened."""
    meta = involved["metadata"]
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name'][:200]}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"),
                           "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
        "reason": reason,
        "message": message[:1024],
        "type": event_type,
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": socket.gethostname()[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    try:
        request(cluster, f"record event on {involved.get('kind')} {meta['namespace']}/{meta['name']}", "POST",
                collection_path("v1", "events", meta["namespace"]), body=event)
    except KubeError as err:
        log.warning("could not record an event on %s %s/%s: %s", involved.get("kind"), meta["namespace"], meta["name"], err)


def proxy_request(cluster: Cluster, namespace: str, service: str, port: int, path: str, *, method: str = "GET",
                  body: Any = None, timeout: float = 10) -> tuple[int, str]:
    """An HTTP request to a Service through the API server's service proxy:
    (HTTP status, body text). One attempt: the caller's own wait is the retry. A refusal of
    the proxy itself (RBAC) is raised as Forbidden; the proxied answer is returned as is."""
    url = f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path.lstrip('/')}"
    try:
        response = cluster.api.call_api(url, method, header_params={"Accept": "application/json", "Content-Type": "application/json"},
                                        body=body, auth_settings=["BearerToken"], _preload_content=False,
                                        _request_timeout=timeout)
        raw = response[0] if isinstance(response, tuple) else response
        return int(raw.status), raw.data.decode("utf-8", "replace")
    except ApiException as err:
        if err.status in (401, 403) and _api_status_kind(err.body):
            raise from_exception(err, f"{method} service {namespace}/{service}:{port} through the API server proxy",
                                 cluster.host) from err
        return int(err.status or 0), (err.body.decode("utf-8", "replace") if isinstance(err.body, bytes) else str(err.body or ""))


def _api_status_kind(body: Any) -> bool:
    """The API server's own refusal (a Status object), not an answer from the proxied service."""
    try:
        return bool(json.loads(body or "{}").get("kind") == "Status")
    except (ValueError, TypeError, AttributeError):
        return False


def watch_deployment(cluster: Cluster, namespace: str, name: str, window: Callable[[], float]) -> Iterator[Obj | None]:
    return watch_named(
        cluster, f"deployment {namespace}/{name}",
        lambda: get(cluster, "apps/v1", "Deployment", namespace, name),
        cluster.apps.list_namespaced_deployment, (namespace,), name, window,
    )


class Informer:
    """One collection (a path and selectors), listed then watched in a daemon thread. Puts on
    `events`: ("sync", key, items) after each (re-)list, (type, key, object) for ADDED /
    MODIFIED / DELETED, and ("error", key, KubeError) when it cannot go on (e.g. Forbidden)."""

    def __init__(self, cluster: Cluster, key: str, path: str, events: queue.Queue[tuple[str, str, Any]], *,
                 label_selector: str | None = None, field_selector: str | None = None,
                 window: float = WATCH_WINDOW_SECONDS, project: Callable[[Obj], Obj] | None = None) -> None:
        self.cluster = cluster
        # What is kept of each object (k8s/pods.slim_pod: 2 KB of a training pod's 22): at
        # 11,001 pods the reap step held every whole pod, over 1 GB.
        self.project = project
        self.key = key
        self.path = path
        self.events = events
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.window = window
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"informer-{key}", daemon=True)

    def start(self) -> Informer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        try:
            for event in reconnecting(self.cluster, self.path, self._list, self._watch, stopped=self.stopped.is_set,
                                      pause=self.stopped.wait):
                if event is not None:
                    self.events.put((event[0], self.key, event[1]))
        except Exception as err:  # noqa: BLE001 - reported to the loop, which raises it in the step's thread
            self.events.put(("error", self.key, err))

    def _list(self) -> tuple[list[tuple[str, Any]], str]:
        items, version = list_objects(self.cluster, self.path, label_selector=self.label_selector,
                                      field_selector=self.field_selector, project=self.project)
        return [("sync", items)], version

    def _watch(self, version: str) -> Iterator[tuple[tuple[str, Any] | None, str]]:
        query: list[tuple[str, Any]] = [("watch", "true"), ("resourceVersion", version), ("allowWatchBookmarks", "true"),
                                        ("timeoutSeconds", int(self.window))]
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        response = self.cluster.api.call_api(self.path, "GET", query_params=query, header_params={"Accept": "application/json"},
                                             auth_settings=["BearerToken"], _preload_content=False,
                                             _request_timeout=self.window + 15)
        raw = response[0] if isinstance(response, tuple) else response
        try:
            for line in iter_resp_lines(raw):
                if self.stopped.is_set():
                    break
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    code = int(obj.get("code") or 500)
                    raise ApiException(status=code, reason=str(obj.get("message")))
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED") and self.project is not None:
                    obj = self.project(obj)
                yield ((kind, obj) if kind in ("ADDED", "MODIFIED", "DELETED") else None), version
        finally:
            raw.release_conn()


# Objects every namespace has, made by Kubernetes itself rather than by anyone's workload.
_BUILT_IN = {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}
_NOT_CHECKED = frozenset({"events", "bindings", "localsubjectaccessreviews", "tokenreviews", "selfsubjectaccessreviews"})


def _namespaced_resources(cluster: Cluster) -> list[tuple[str, str, str]]:
    """(apiVersion, plural, kind) of every namespaced resource that can be listed, preferred
    versions only, from the API server's discovery."""
    found: list[tuple[str, str, str]] = []
    versions = ["v1"]
    groups = request(cluster, "discover API groups", "GET", "/apis")
    for group in groups.get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if preferred:
            versions.append(preferred)
    for version in versions:
        path = "/api/v1" if version == "v1" else f"/apis/{version}"
        listing = request(cluster, f"discover {version}", "GET", path)
        for resource in listing.get("resources") or []:
            name = resource.get("name", "")
            if "/" in name or not resource.get("namespaced") or "list" not in (resource.get("verbs") or []):
                continue
            if name in _NOT_CHECKED:
                continue
            found.append((version, name, resource.get("kind", name)))
    return found


def foreign_objects(cluster: Cluster, namespace: str, selector: str) -> list[str]:
    """What in `namespace` is neither labelled `selector` nor owned (through ownerReferences,
    e.g. Deployment -> ReplicaSet -> Pod) by something that is: every namespaced resource
    type the API server serves is listed, metadata only. Besides built-ins (the default
    ServiceAccount, kube-root-ca.crt) and Endpoints of a Service of the job, anything found
    means the namespace holds more than the job. A type that cannot be listed counts as
    foreign: deleting what could not be checked is not safe."""
    everything: dict[str, tuple[str, Obj]] = {}
    belongs: set[str] = set()
    services: set[str] = set()
    problems: list[str] = []
    for version, plural, kind in _namespaced_resources(cluster):
        path = collection_path(version, plural, namespace)
        try:
            all_items, _ = list_objects(cluster, path, metadata_only=True)
            if not all_items:
                continue
            labelled, _ = list_objects(cluster, path, label_selector=selector, metadata_only=True)
        except KubeError as err:
            problems.append(f"{plural} ({version}) could not be listed: {err}")
            continue
        for item in all_items:
            uid = (item.get("metadata") or {}).get("uid", "")
            everything[uid] = (kind, item)
        for item in labelled:
            uid = (item.get("metadata") or {}).get("uid", "")
            belongs.add(uid)
            if kind == "Service":
                services.add(item["metadata"]["name"])
    changed = True
    while changed:  # ownership is transitive
        changed = False
        for uid, (_kind, item) in everything.items():
            if uid in belongs:
                continue
            owners = (item.get("metadata") or {}).get("ownerReferences") or []
            if any(o.get("uid") in belongs for o in owners):
                belongs.add(uid)
                changed = True
    foreign = []
    for uid, (kind, item) in sorted(everything.items(), key=lambda e: (e[1][0], e[1][1]["metadata"]["name"])):
        name = item["metadata"]["name"]
        if uid in belongs or (kind, name) in _BUILT_IN or (kind == "Endpoints" and name in services):
            continue
        foreign.append(f"{kind} {name}")
    return problems + foreign


def label_selector_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def wait_for_rollout(cluster: Cluster, namespace: str, name: str, *, selector: Mapping[str, str], template_hash: str,
                     timeout: float, clock: Callable[[], float] | None = None,
                     on_change: Callable[[str], None] | None = None) -> Rollout:
    """Follow a Deployment (one watch) until its rollout is done or failed. At most every few
    seconds one pod list (by label, whatever the replica count) looks for a new pod that
    cannot become ready (failed, crash-looping, image not pulled), which fails the wait at
    once instead of at the progress deadline."""
    import time as _time

    now = clock or _time.monotonic
    deadline = Deadline.after(timeout, now)
    last_look: float | None = None
    current: Obj | None = None
    last_message = ""
    for update in watch_deployment(cluster, namespace, name, lambda: max(1.0, deadline.clamp(5.0))):
        if update is not None:
            current = update
        if current is None:
            continue
        state = rollout_status(current)
        if state.message != last_message and on_change is not None:
            on_change(state.message)
        last_message = state.message
        if state.done or state.failed:
            return state
        moment = now()
        if last_look is None or moment - last_look >= 4.5:
            last_look = moment
            pods, _ = list_objects(cluster, collection_path("v1", "pods", namespace), label_selector=label_selector_text(selector))
            problem = new_pod_problem(pods, template_hash, TEMPLATE_HASH_ANNOTATION)
            if problem:
                return Rollout(False, True, problem)
        if deadline.expired(moment):
            return Rollout(False, True, f"not ready after {timeout:g}s: {state.message}")
    return Rollout(False, True, f"deployment {namespace}/{name} was deleted while waiting for it")
