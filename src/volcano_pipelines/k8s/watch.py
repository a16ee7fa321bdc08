"""A watch of one named object that survives API server restarts, dropped connections and
`410 Gone`: on a gap it re-reads the object and resumes from its resourceVersion."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import watch
from kubernetes.client.rest import ApiException

from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.errors import from_exception, is_transient

__all__ = ["WATCH_WINDOW_SECONDS", "watch_named"]

log = logging.getLogger(__name__)

# How long one watch request stays open; each return is a chance to look at the deadline
# and the scheduling hints. Short enough to notice a silently dead connection.
WATCH_WINDOW_SECONDS = 20

Obj = dict[str, Any]


class _Gone(Exception):
    """The resourceVersion expired (HTTP 410): re-read and start over."""


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
    delays = cluster.policy.delays()
    while True:
        if resource_version is None:
            obj = get()
            if obj is None:
                return
            resource_version = obj["metadata"]["resourceVersion"]
            yield obj
        stream = new_watch()
        seconds = max(1, int(window()))
        try:
            for event in stream.stream(
                list_call,
                *list_args,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                _request_timeout=seconds + 10,
            ):
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    code = (obj or {}).get("code", 500)
                    if code == 410:
                        raise _Gone()
                    raise ApiException(status=code, reason=str((obj or {}).get("message")))
                if not isinstance(obj, dict):
                    obj = cluster.to_dict(obj)
                resource_version = obj["metadata"]["resourceVersion"]
                if kind == "DELETED":
                    return
                if kind in ("ADDED", "MODIFIED"):
                    yield obj
            delays = cluster.policy.delays()
            yield None
        except (_Gone, ApiException) as err:
            if isinstance(err, _Gone) or err.status == 410:
                log.info("watch of %s expired (410 Gone); re-reading it", what)
                resource_version = None
                continue
            if not is_transient(err):
                raise from_exception(err, f"watch {what}", cluster.host) from err
            yield from _pause(cluster, what, err, delays)
        except Exception as err:  # noqa: BLE001 - transient transport errors resume, others propagate
            if not is_transient(err):
                raise
            yield from _pause(cluster, what, err, delays)
        finally:
            stream.stop()


def _pause(cluster: Cluster, what: str, err: BaseException, delays: Iterator[float]) -> Iterator[None]:
    detail = err.status if isinstance(err, ApiException) else type(err).__name__
    log.warning("watch of %s interrupted (%s); resuming", what, detail)
    yield None
    cluster.sleep(next(delays))
