"""The one reconnecting watch: every API stream this package follows (one named object, or a
collection through an Informer) runs through `reconnecting`, which reads, watches from the
resourceVersion it read, and on a gap resumes: `410 Gone` re-reads, a dropped connection or a
restarting API server waits (the client's one backoff, k8s/retry.py) and resumes from the last
version seen, anything else is raised as a typed error. The transports differ (the typed
client's Watch, a raw collection path); the error policy is written once, here."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kubernetes import watch
from kubernetes.client.rest import ApiException

from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.errors import KubeError, from_exception, is_transient

__all__ = ["LIST_PAGE", "WATCH_WINDOW_SECONDS", "Event", "RawWatch", "list_raw", "reconnecting", "watch_collection",
           "watch_named"]

log = logging.getLogger(__name__)

# How long one watch request stays open; each return is a chance to look at the deadline
# and the scheduling hints. Short enough to notice a silently dead connection.
WATCH_WINDOW_SECONDS = 20

Obj = dict[str, Any]
# Objects per page of a collection's list. The typed client turns 11,000 pods read at once into
# 2.4 GB and 48 CPU-seconds (measured on the test plane); pages of plain JSON, each object cut
# to what the step reads (`project`) before the next page, keep a step small at any size.
LIST_PAGE = 500


class RawWatch(watch.Watch):  # type: ignore[misc]
    """The client's Watch without its model objects: each event's object is the dict the API
    sent (the typed client would build a model from it, only for us to turn it back)."""

    def get_return_type(self, func: Any) -> None:
        return None


def list_raw(list_call: Callable[..., Any], list_args: tuple[Any, ...], project: Callable[[Obj], Obj] = lambda o: o,
             **selector: Any) -> tuple[list[Obj], str]:
    """Every object of a collection as plain dicts, page by page (a consistent snapshot: the
    continue token keeps the first page's version), each through `project`; and the list's
    resourceVersion."""
    items: list[Obj] = []
    token: str | None = None
    while True:
        answer = list_call(*list_args, **selector, limit=LIST_PAGE, _preload_content=False,
                           **({"_continue": token} if token else {}))
        page = json.loads(answer.data)
        items += [project(item) for item in page.get("items") or []]
        meta = page.get("metadata") or {}
        token = meta.get("continue") or None
        if token is None:
            return items, str(meta.get("resourceVersion") or "")


# One event of a watch: (type, object), type ADDED / MODIFIED / DELETED, or "sync" with the
# items of a (re-)read.
Event = tuple[str, Any]


def reconnecting(
    cluster: Cluster,
    what: str,
    read: Callable[[], tuple[Iterable[Event], str] | None],
    stream: Callable[[str], Iterator[tuple[Event | None, str]]],
    *,
    stopped: Callable[[], bool] = lambda: False,
    pause: Callable[[float], object] | None = None,
) -> Iterator[Event | None]:
    """Yields the events of `read()` (what to start from, and the resourceVersion to watch
    from; None ends the watch: the object is gone), then those of `stream(version)` (pairs of
    an event, or None for a bookmark, and the version it carries), again and again: None at the
    end of each watch window and before each pause (a tick for deadlines). Ends when
    `stopped()` or when read() returns None."""
    version: str | None = None
    delays = cluster.policy.delays()
    while not stopped():
        try:
            if version is None:
                start = read()
                if start is None:
                    return
                events, version = start
                yield from events
            for event, seen in stream(version):
                version = seen  # a resumed watch starts after the last event it delivered
                if event is not None:
                    yield event
            delays = cluster.policy.delays()
            yield None
        except ApiException as err:
            if err.status == 410:
                log.info("watch of %s expired (410 Gone); reading it again", what)
                version = None
                continue
            if not is_transient(err):
                raise from_exception(err, f"watch {what}", cluster.host) from err
            yield from _pause(what, err, next(delays), pause or cluster.sleep)
        except KubeError:
            raise
        except Exception as err:
            if not is_transient(err):
                raise
            yield from _pause(what, err, next(delays), pause or cluster.sleep)


def _pause(what: str, err: BaseException, delay: float, pause: Callable[[float], object]) -> Iterator[None]:
    detail = err.status if isinstance(err, ApiException) else type(err).__name__
    log.warning("watch of %s interrupted (%s); resuming", what, detail)
    yield None
    pause(delay)


def watch_named(
    cluster: Cluster,
    what: str,
    get: Callable[[], Obj | None],
    list_call: Callable[..., Any],
    list_args: tuple[Any, ...],
    name: str,
    window: Callable[[], float] = lambda: WATCH_WINDOW_SECONDS,
    *,
    resource_version: str | None = None,
    new_watch: Callable[[], Any] = watch.Watch,
) -> Iterator[Obj | None]:
    """Yields the object every time it changes, and None at least every `window()` seconds (a
    tick for deadlines and hints). Ends when the object is deleted. `get` re-reads it (None:
    gone); `list_call(*list_args, **watch params)` is the list function to watch with.
    `resource_version` resumes an earlier watch (None: start from a fresh read)."""
    resumed = resource_version

    def read() -> tuple[Iterable[Event], str] | None:
        nonlocal resumed
        if resumed is not None:  # the first watch resumes where the caller left off
            version, resumed = resumed, None
            return (), version
        obj = get()
        return None if obj is None else ([("ADDED", obj)], obj["metadata"]["resourceVersion"])

    stream = _typed_stream(cluster, list_call, list_args, {"field_selector": f"metadata.name={name}"}, window,
                           new_watch)
    for event in reconnecting(cluster, what, read, stream):
        if event is None:
            yield None
        elif event[0] == "DELETED":
            return
        else:
            yield event[1]


def watch_collection(
    cluster: Cluster,
    what: str,
    list_call: Callable[..., Any],
    list_args: tuple[Any, ...],
    label_selector: str,
    *,
    stopped: Callable[[], bool] = lambda: False,
    pause: Callable[[float], object] | None = None,
    window: Callable[[], float] = lambda: WATCH_WINDOW_SECONDS,
    new_watch: Callable[[], Any] = RawWatch,
    started: Callable[[Any], object] = lambda _watcher: None,
    project: Callable[[Obj], Obj] = lambda o: o,
) -> Iterator[Event | None]:
    """Yields ("ADDED", object) for every object a list of the collection returns, then every
    change from that list's resourceVersion on, and None at the end of each watch window. A
    dropped connection resumes from the last version seen, so a change between two windows (a
    pod deleted right then) is never missed; `410 Gone` lists again. Objects are dicts, each
    through `project` (what the caller keeps of it). `started(watcher)` is told each new watch
    (stopping it ends the window early); the watch ends when `stopped()`."""

    def read() -> tuple[Iterable[Event], str]:
        items, version = list_raw(list_call, list_args, project, label_selector=label_selector)
        return [("ADDED", item) for item in items], version

    stream = _typed_stream(cluster, list_call, list_args, {"label_selector": label_selector}, window, new_watch,
                           started)
    for event in reconnecting(cluster, what, read, stream, stopped=stopped, pause=pause):
        if stopped():
            return
        yield event if event is None else (event[0], project(event[1]))


def _typed_stream(
    cluster: Cluster,
    list_call: Callable[..., Any],
    list_args: tuple[Any, ...],
    selector: dict[str, str],
    window: Callable[[], float],
    new_watch: Callable[[], Any],
    started: Callable[[Any], object] = lambda _watcher: None,
) -> Callable[[str], Iterator[tuple[Event | None, str]]]:
    """`reconnecting`'s stream over the typed client's Watch: one window from `version`, each
    event as (type, dict) with the version it carries; a bookmark as None; an ERROR event
    raised as the answer it stands for (410 Gone: read again)."""

    def stream(version: str) -> Iterator[tuple[Event | None, str]]:
        watcher = new_watch()
        started(watcher)
        seconds = max(1, int(window()))
        try:
            for event in watcher.stream(list_call, *list_args, **selector, resource_version=version,
                                        allow_watch_bookmarks=True, timeout_seconds=seconds,
                                        _request_timeout=seconds + 10):
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    raise ApiException(status=(obj or {}).get("code", 500), reason=str((obj or {}).get("message")))
                if not isinstance(obj, dict):
                    obj = cluster.to_dict(obj)
                version = obj["metadata"]["resourceVersion"]
                yield ((kind, obj) if kind in ("ADDED", "MODIFIED", "DELETED") else None), version
        finally:
            watcher.stop()

    return stream
