"""The client layer's own logic without a server: the watch resumes after a dropped
connection and after `410 Gone`, the retry policy retries only what is transient (fast when
nothing listens), and answers become typed errors. The transport is scripted; sleeps are
recorded, never slept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from volcano_pipelines.k8s import errors, retry
from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.watch import watch_named


def obj(rv: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": "j", "resourceVersion": rv}, "status": {"state": {"phase": phase}}}


class ScriptedWatch:
    """Stands in for kubernetes.watch.Watch: each stream() call plays the next script entry (a
    list of events, or an exception raised after its events)."""

    def __init__(self, streams: list[list[Any]], seen: list[dict[str, Any]]) -> None:
        self.streams = streams
        self.seen = seen

    def stream(self, _fn: Any, *_args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.seen.append(kwargs)
        for item in self.streams.pop(0):
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        pass


def cluster(sleeps: list[float]) -> Cluster:
    return Cluster(api=client.ApiClient(), host="https://test", sleep=sleeps.append)


def test_watch_resumes_after_a_dropped_connection_from_the_last_version() -> None:
    sleeps: list[float] = []
    seen: list[dict[str, Any]] = []
    streams = [
        [{"type": "MODIFIED", "object": obj("11")}, urllib3.exceptions.ProtocolError("connection reset")],
        [{"type": "MODIFIED", "object": obj("12", "Completed")}],
    ]
    gets = iter([obj("10", "Pending")])
    out = []
    for item in watch_named(cluster(sleeps), "job ns/j", lambda: next(gets), lambda: None, (), "j",
                            new_watch=lambda: ScriptedWatch(streams, seen)):
        out.append(item)
        if item is not None and item["status"]["state"]["phase"] == "Completed":
            break
    phases = [o["status"]["state"]["phase"] if o else None for o in out]
    assert phases == ["Pending", "Running", None, "Completed"]
    assert [s["resource_version"] for s in seen] == ["10", "11"]  # resumed, not restarted
    assert sleeps == [0.5]


def test_watch_rereads_after_410_gone_and_ends_when_deleted() -> None:
    sleeps: list[float] = []
    seen: list[dict[str, Any]] = []
    streams = [
        [{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}],
        [ApiException(status=410, reason="Gone")],
        [{"type": "DELETED", "object": obj("30")}],
    ]
    gets = iter([obj("10"), obj("20"), obj("25")])
    out = list(watch_named(cluster(sleeps), "job ns/j", lambda: next(gets), lambda: None, (), "j",
                           new_watch=lambda: ScriptedWatch(streams, seen)))
    assert [o["metadata"]["resourceVersion"] for o in out] == ["10", "20", "25"]  # re-read each time
    assert [s["resource_version"] for s in seen] == ["10", "20", "25"]
    assert sleeps == []


def test_watch_raises_a_typed_error_for_a_refusal() -> None:
    streams = [[ApiException(status=403, reason="Forbidden")]]
    with pytest.raises(errors.Forbidden):
        list(watch_named(cluster([]), "job ns/j", lambda: obj("1"), lambda: None, (), "j",
                         new_watch=lambda: ScriptedWatch(streams, [])))


def test_retry_policy_retries_transient_answers_with_capped_backoff() -> None:
    sleeps: list[float] = []
    answers: list[BaseException | str] = [ApiException(status=503), ApiException(status=429), "ok"]

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert retry.call("read job", call, sleep=sleeps.append) == "ok"
    assert sleeps == [0.5, 1.0]
    policy = retry.RetryPolicy(attempts=6)
    delays = policy.delays()
    assert [next(delays) for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_retry_gives_up_after_the_attempts_with_unavailable() -> None:
    sleeps: list[float] = []

    def call() -> None:
        raise ApiException(status=500, reason="Internal")

    with pytest.raises(errors.Unavailable) as info:
        retry.call("create job ns/j", call, host="https://x", sleep=sleeps.append)
    assert len(sleeps) == 5 and "create job ns/j" in str(info.value)


def test_connection_refused_fails_fast() -> None:
    sleeps: list[float] = []
    refused = urllib3.exceptions.MaxRetryError(None, "/apis", urllib3.exceptions.NewConnectionError(
        None, "Failed to establish a new connection: [Errno 111] Connection refused"))

    def call() -> None:
        raise refused

    with pytest.raises(errors.Unavailable) as info:
        retry.call("read job ns/j", call, host="https://127.0.0.1:1", sleep=sleeps.append)
    assert sleeps == [0.5]  # one short retry, not 15 s of backoff
    assert "connection refused" in str(info.value) and "127.0.0.1:1" in str(info.value)


@pytest.mark.parametrize("status,kind,exit_code", [
    (404, errors.NotFound, 3), (409, errors.Conflict, 3), (403, errors.Forbidden, 3), (401, errors.Forbidden, 3),
    (422, errors.Invalid, 2), (400, errors.KubeError, 3),
])
def test_answers_become_typed_errors(status: int, kind: type, exit_code: int) -> None:
    def call() -> None:
        raise ApiException(status=status, reason="x")

    with pytest.raises(kind) as info:
        retry.call("do it", call, sleep=lambda _: None)
    assert info.value.exit_code == exit_code and info.value.status == status


def test_errors_that_are_not_api_answers_pass_through() -> None:
    def call() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        retry.call("do it", call, sleep=lambda _: None)


# --- the one reconnecting loop (k8s/watch.py), as the Informer uses it ----------------------------

def test_reconnecting_rereads_after_410_resumes_after_a_drop_and_raises_the_rest() -> None:
    from volcano_pipelines.k8s.errors import KubeError
    from volcano_pipelines.k8s.watch import reconnecting

    sleeps: list[float] = []
    reads: list[str] = []
    started_from: list[str] = []
    script: list[list[Any]] = [
        [(("ADDED", "a"), "11"), urllib3.exceptions.ProtocolError("connection reset")],  # resumes from 11
        [ApiException(status=410)],  # re-reads
        [(None, "21"), (("MODIFIED", "b"), "22")],  # a bookmark, then an event; window ends
        [ApiException(status=403, reason="Forbidden")],  # not transient: raised, typed
    ]

    def read() -> tuple[list[tuple[str, Any]], str]:
        reads.append("read")
        return [("sync", len(reads))], str(10 * len(reads))

    def stream(version: str) -> Iterator[tuple[Any, str]]:
        started_from.append(version)
        for item in script.pop(0):
            if isinstance(item, BaseException):
                raise item
            yield item

    events: list[Any] = []
    with pytest.raises(KubeError):
        for event in reconnecting(cluster(sleeps), "things", read, stream):
            events.append(event)
    assert events == [("sync", 1), ("ADDED", "a"), None, ("sync", 2), ("MODIFIED", "b"), None]
    assert started_from == ["10", "11", "20", "22"]
    assert sleeps == [0.5]  # one pause, by the client's backoff


def test_backoff_is_capped_and_jitter_stays_within_half_to_full() -> None:
    from volcano_pipelines import backoff

    assert [backoff.delay(n, 0.5, 4.0) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.delay(3, 0.5, 4.0, jitter=True, rand=lambda: 0.0) == 1.0
    assert backoff.delay(3, 0.5, 4.0, jitter=True, rand=lambda: 1.0) == 2.0
    assert backoff.delay(10_000, 0.5, 4.0) == 4.0  # no overflow for a long outage


class Listed:
    """What a list call with `_preload_content=False` returns: one page of the JSON list
    (`continue` names the next page)."""

    def __init__(self, items: list[dict[str, Any]], version: str, token: str | None = None) -> None:
        meta = {"resourceVersion": version, **({"continue": token} if token else {})}
        self.data = json.dumps({"items": items, "metadata": meta}).encode()


def pod(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "resourceVersion": rv}}


def test_a_collection_watch_lists_then_resumes_from_the_last_version_so_no_change_is_lost() -> None:
    # A pod deleted while the connection is down is still seen deleted: the next watch starts
    # from the last version delivered, not from a fresh list that no longer holds the pod.
    from volcano_pipelines.k8s.watch import watch_collection

    sleeps: list[float] = []
    seen: list[dict[str, Any]] = []
    lists: list[dict[str, Any]] = []
    streams = [
        [{"type": "MODIFIED", "object": pod("a", "6")}, urllib3.exceptions.ProtocolError("connection reset")],
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}},
         {"type": "DELETED", "object": pod("a", "8")}],
    ]
    watchers: list[Any] = []

    def list_pods(namespace: str, **kwargs: Any) -> Listed:
        # Two pages: the list is read page by page as plain JSON.
        lists.append({"namespace": namespace, **kwargs})
        if kwargs.get("_continue") is None:
            return Listed([pod("a", "4")], "5", token="page-2")
        return Listed([pod("b", "5")], "5")

    out: list[Any] = []
    for event in watch_collection(cluster(sleeps), "pods of job ns/j", list_pods, ("ns",), "job=j",
                                  new_watch=lambda: ScriptedWatch(streams, seen), started=watchers.append):
        out.append(None if event is None else (event[0], event[1]["metadata"]["name"]))
        if event is not None and event[0] == "DELETED":
            break
    assert out == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), None, ("DELETED", "a")]
    page = {"namespace": "ns", "label_selector": "job=j", "limit": 500, "_preload_content": False}
    assert lists == [page, {**page, "_continue": "page-2"}]  # listed once (two pages): resumed, not re-listed
    assert [(s["resource_version"], s["label_selector"]) for s in seen] == [("5", "job=j"), ("6", "job=j")]
    assert len(watchers) == 2 and sleeps == [0.5]


def test_a_collection_watch_that_is_refused_raises_a_typed_error_and_a_stopped_one_ends() -> None:
    from volcano_pipelines.k8s.watch import watch_collection

    def refused(*_args: Any, **_kwargs: Any) -> Listed:
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(errors.Forbidden):
        list(watch_collection(cluster([]), "pods", refused, ("ns",), "job=j"))
    # Stopped: nothing more after the list's events, and no watch is opened.
    stopped = False
    seen: list[dict[str, Any]] = []

    def list_pods(*_args: Any, **_kwargs: Any) -> Listed:
        nonlocal stopped
        stopped = True
        return Listed([pod("a", "4")], "4")

    out = list(watch_collection(cluster([]), "pods", list_pods, ("ns",), "job=j", stopped=lambda: stopped,
                                new_watch=lambda: ScriptedWatch([], seen)))
    assert out == [] and seen == []
