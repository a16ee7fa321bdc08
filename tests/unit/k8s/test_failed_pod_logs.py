"""A failed pod's last log lines outlive the pod: the failed-pod watch reads them (of the
application's container, named) while the pod exists, and the post-mortem written after a
restart deleted it shows them under that pod, never under its successor of the same name."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from volcano_pipelines.k8s.pods import DEFAULT_CONTAINER_ANNOTATION, FailedPodWatcher, MissingInfo, default_container
from volcano_pipelines.postmortem import save
from volcano_pipelines.postmortem.reads import Collected


def pod(uid: str, phase: str, containers: tuple[str, ...] = ("tensorflow",), annotation: str | None = None,
        name: str = "rsa-chief-0") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid, "labels": {"volcano.sh/task-spec": "chief"}}
    if annotation is not None:
        meta["annotations"] = {DEFAULT_CONTAINER_ANNOTATION: annotation}
    statuses = [{"name": c, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 1, "reason": "Error"}} if phase == "Failed" else {"running": {}}}
                for c in containers]
    return {"metadata": meta, "spec": {"containers": [{"name": c, "image": "trainer"} for c in containers]},
            "status": {"phase": phase, "containerStatuses": statuses}}


@pytest.mark.parametrize(("containers", "annotation", "expected"), [
    (("tensorflow",), None, "tensorflow"),
    (("tensorflow", "istio-proxy"), None, "tensorflow"),
    (("istio-proxy", "tensorflow"), "tensorflow", "tensorflow"),  # the injector's annotation wins
    (("tensorflow",), "gone", "tensorflow"),  # an annotation naming no container is ignored
    ((), None, None),
])
def test_the_log_read_is_of_the_application_container(containers: tuple[str, ...], annotation: str | None,
                                                      expected: str | None) -> None:
    assert default_container(pod("u", "Running", containers, annotation)) == expected


class LogReader:
    """The one API call the watcher makes for a failed pod: its log."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.calls.append((name, namespace, kwargs))
        return self.text


class FakeCluster:
    def __init__(self, core: LogReader) -> None:
        self.core = core


def test_the_watch_keeps_a_failed_pods_log_by_uid_and_container() -> None:
    core = LogReader("Traceback ...\nUnavailableError: worker 0\n")
    watcher = FailedPodWatcher(FakeCluster(core), "team-a", "rsa", 20, MissingInfo())  # type: ignore[arg-type]
    watcher._record(pod("u1", "Running", ("istio-proxy", "tensorflow"), "tensorflow"))
    assert core.calls == [] and watcher.kept_logs() == {}  # a running pod's log is not read
    watcher._record(pod("u1", "Failed", ("istio-proxy", "tensorflow"), "tensorflow"))
    assert [(n, ns, kw.get("container"), kw.get("tail_lines")) for n, ns, kw in core.calls] == [
        ("rsa-chief-0", "team-a", "tensorflow", 20)]
    assert watcher.kept_logs() == {"u1": {"tensorflow": core.text}}
    assert watcher.log_tail("rsa-chief-0") == core.text
    # The same pod seen again (deleted by the restart): not read twice, still kept.
    watcher._record(pod("u1", "Failed", ("istio-proxy", "tensorflow"), "tensorflow"), deleted=True)
    assert len(core.calls) == 1 and watcher.kept_logs() == {"u1": {"tensorflow": core.text}}


def _restarted_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector finds job rsa restarted once: pod u1 (failed, deleted) and its successor u2."""
    job = {"metadata": {"name": "rsa", "namespace": "team-a", "uid": "j"},
           "spec": {"tasks": [{"name": "chief"}], "maxRetry": 3},
           "status": {"state": {"phase": "Running"}, "retryCount": 1}}
    first, second = pod("u1", "Failed"), pod("u2", "Running")
    monkeypatch.setattr(save.collect, "read_state",
                        lambda *a, **k: Collected(job=job, pods=[second, first], deleted=["u1"]))


def test_the_post_mortem_shows_a_deleted_pods_kept_log_and_its_successors_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _restarted_job(monkeypatch)
    # Read now, by name: the pod that exists now (the successor).
    monkeypatch.setattr(save.collect, "read_logs", lambda *a, **k: {"rsa-chief-0": {"tensorflow": "step 50\n"}})
    saved = save.save_post_mortem(
        object(), "team-a", "rsa", directory=tmp_path, copies=[],  # type: ignore[arg-type]
        kept_logs={"u1": {"tensorflow": "UnavailableError: worker 0\n"}, "u2": {"tensorflow": "stale\n"}})
    assert "error" not in saved, saved
    record = json.loads(Path(saved["json"]).read_text())
    logs = {p["uid"]: [line for c in p["containers"] for line in c["log"]] for p in record["pods"]}
    assert logs == {"u1": ["UnavailableError: worker 0"], "u2": ["step 50"]}, logs
    assert "UnavailableError: worker 0" in Path(saved["markdown"]).read_text()


class TogetherLogReader(LogReader):
    """The first read answers only once the second has started (within a second): pods that
    fail together, read one after the other, would lose the first pod's log."""

    def __init__(self) -> None:
        super().__init__("")
        self.second_started = threading.Event()

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.calls.append((name, namespace, kwargs))
        if name.endswith("-0"):
            return f"{name}: giving up\n" if self.second_started.wait(timeout=1.0) else ""
        self.second_started.set()
        return f"{name}: giving up\n"


def test_pods_failing_together_are_read_together_and_each_read_once() -> None:
    core = TogetherLogReader()
    watcher = FailedPodWatcher(FakeCluster(core), "team-a", "boom", 20, MissingInfo())  # type: ignore[arg-type]
    watcher._record(pod("u0", "Failed", name="boom-worker-0"))
    watcher._record(pod("u1", "Failed", name="boom-worker-1"))
    watcher._record(pod("u0", "Failed", name="boom-worker-0"))  # seen again while its read is under way
    assert watcher.kept_logs() == {"u0": {"tensorflow": "boom-worker-0: giving up\n"},
                                   "u1": {"tensorflow": "boom-worker-1: giving up\n"}}
    assert sorted(name for name, _, _ in core.calls) == ["boom-worker-0", "boom-worker-1"]
    # At most LOGGED_FAILURES pods are read: a job of many failing pods costs a few reads.
    for i in range(2, 2 + FailedPodWatcher.LOGGED_FAILURES):
        watcher._record(pod(f"u{i}", "Failed", name=f"boom-worker-{i}"))
    assert len(watcher.kept_logs()) == FailedPodWatcher.LOGGED_FAILURES


def test_a_waiter_in_another_thread_never_joins_a_reader_not_started_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI saw `vpipe status` (the KFP exit handler) fail with "cannot join thread before it is
    started": the watch thread had listed a log reader and not started it yet when the step's
    thread asked for the log. Here the start is slowed and a waiter runs meanwhile."""
    import volcano_pipelines.k8s.pods as pods_module

    core = LogReader("worker 0: exit 1\n")
    watcher = FailedPodWatcher(FakeCluster(core), "team-a", "rsa", 20, MissingInfo())  # type: ignore[arg-type]
    errors: list[BaseException] = []
    waiters: list[threading.Thread] = []

    def wait_for_logs() -> None:
        try:
            watcher.kept_logs()
        except BaseException as err:  # noqa: BLE001 - the test reports it
            errors.append(err)

    real_thread = threading.Thread

    class SlowStart(real_thread):
        def start(self) -> None:
            waiter = real_thread(target=wait_for_logs)
            waiter.start()
            waiters.append(waiter)
            waiter.join(timeout=0.3)  # the waiter runs first, as the step's thread did
            super().start()

    monkeypatch.setattr(pods_module.threading, "Thread", SlowStart)
    watcher._record(pod("u1", "Failed"))
    for waiter in waiters:
        waiter.join(timeout=5)
    assert errors == [] and watcher.kept_logs() == {"u1": {"tensorflow": core.text}}


class FlakyLogReader(LogReader):
    """Answers with the given errors first, then the text."""

    def __init__(self, text: str, errors: list[BaseException]) -> None:
        super().__init__(text)
        self.errors = errors

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.calls.append((name, namespace, kwargs))
        if self.errors:
            raise self.errors.pop(0)
        return self.text


def _api_error(status: int) -> BaseException:
    from kubernetes.client.exceptions import ApiException

    return ApiException(status=status, reason={403: "Forbidden", 404: "Not Found", 500: "Internal Server Error"}[status])


def test_one_log_request_typed_for_both_readers() -> None:
    """read_log_tail raises the typed error; pod_log_tail (the report's reader) turns every
    error into "no lines" and notes a refused read as a missing permission."""
    from volcano_pipelines.k8s.errors import Forbidden, NotFound, Unavailable
    from volcano_pipelines.k8s.pods import pod_log_tail, read_log_tail

    core = LogReader("last line\n")
    assert read_log_tail(FakeCluster(core), "team-a", "p", 5, "tensorflow") == "last line\n"  # type: ignore[arg-type]
    assert core.calls[0][:2] == ("p", "team-a")
    assert {k: core.calls[0][2][k] for k in ("tail_lines", "container")} == {"tail_lines": 5, "container": "tensorflow"}
    read_log_tail(FakeCluster(core), "team-a", "p", 5)  # type: ignore[arg-type]
    assert "container" not in core.calls[1][2]  # the API's default container
    assert read_log_tail(FakeCluster(LogReader("")), "team-a", "p", 5) is None  # type: ignore[arg-type]
    for status, kind in ((403, Forbidden), (404, NotFound), (500, Unavailable)):
        with pytest.raises(kind):
            read_log_tail(FakeCluster(FlakyLogReader("x", [_api_error(status)])), "team-a", "p", 5)  # type: ignore[arg-type]
        missing = MissingInfo()
        assert pod_log_tail(FakeCluster(FlakyLogReader("x", [_api_error(status)])), "team-a", "p", 5,  # type: ignore[arg-type]
                            missing) is None
        assert bool(missing.notes()) is (status == 403), (status, missing.notes())
    missing = MissingInfo()
    assert pod_log_tail(FakeCluster(LogReader("ok\n")), "team-a", "p", 5, missing) == "ok\n"  # type: ignore[arg-type]
    assert missing.notes() == []


def test_a_transient_error_is_read_again_and_a_gone_pod_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    import volcano_pipelines.k8s.pods as pods_module

    monkeypatch.setattr(pods_module, "LOG_RETRY_SECONDS", 0.0)
    # A loaded kubelet's error, then the lines: kept, nothing said lost.
    core = FlakyLogReader("worker 0 giving up: exit 3\n", [_api_error(500)])
    watcher = FailedPodWatcher(FakeCluster(core), "team-a", "boom", 20, MissingInfo())  # type: ignore[arg-type]
    watcher._record(pod("u0", "Failed", name="boom-worker-0"))
    assert watcher.kept_logs() == {"u0": {"tensorflow": core.text}} and watcher.lost_logs() == {}
    assert len(core.calls) == 2
    # Gone (the restart deleted it first): one read, and the loss is said with its reason.
    gone = FlakyLogReader("never read", [_api_error(404)])
    watcher = FailedPodWatcher(FakeCluster(gone), "team-a", "boom", 20, MissingInfo())  # type: ignore[arg-type]
    watcher._record(pod("u1", "Failed", name="boom-worker-1"))
    assert watcher.kept_logs() == {} and len(gone.calls) == 1  # (kept_logs waits for the read)
    assert watcher.lost_logs() == {"u1": "pod boom-worker-1: last log lines not kept "
                                         "(the pod was gone before its log could be read)"}
    # Errors every time: LOG_READ_TRIES reads, then the last error is the reason.
    broken = FlakyLogReader("never read", [_api_error(500) for _ in range(pods_module.LOG_READ_TRIES)])
    watcher = FailedPodWatcher(FakeCluster(broken), "team-a", "boom", 20, MissingInfo())  # type: ignore[arg-type]
    watcher._record(pod("u2", "Failed", name="boom-worker-2"))
    lost = watcher.lost_logs()  # (waits for the read)
    assert len(broken.calls) == pods_module.LOG_READ_TRIES
    assert list(lost) == ["u2"] and "not kept (" in lost["u2"]


def test_the_post_mortem_says_which_deleted_pods_log_was_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _restarted_job(monkeypatch)
    monkeypatch.setattr(save.collect, "read_logs", lambda *a, **k: {})
    lost = "pod rsa-chief-0: last log lines not kept (the pod was gone before its log could be read)"
    saved = save.save_post_mortem(
        object(), "team-a", "rsa", directory=tmp_path, copies=[],  # type: ignore[arg-type]
        lost_logs={"u1": lost, "u2": "not gone: no note"})
    record = json.loads(Path(saved["json"]).read_text())
    assert lost in record["notes"] and "not gone: no note" not in record["notes"], record["notes"]
    assert lost in Path(saved["markdown"]).read_text()
