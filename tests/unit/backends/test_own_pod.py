"""The cluster backend's question "is my own pod being deleted?" (on_pod_deleted), against a
fake API: the pod named by $VPIPE_POD_NAME, looked up with a field selector in the pod's
namespace; no name, an error or a pod not being deleted all mean "no" (the cancel then does
what on_cancel says)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from volcano_pipelines.backends.cluster import ClusterBackend
from volcano_pipelines.labels import POD_NAME_ENV


class FakeCore:
    def __init__(self, deleting: bool | None, fail: bool = False) -> None:
        self.deleting, self.fail = deleting, fail
        self.asked: list[tuple[str, str]] = []

    def list_namespaced_pod(self, namespace: str, field_selector: str = "", **_: Any) -> Any:
        self.asked.append((namespace, field_selector))
        if self.fail:
            raise RuntimeError("connection refused")
        if self.deleting is None:
            return SimpleNamespace(items=[])
        stamp = "2026-12-01T20:00:00Z" if self.deleting else None
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(deletion_timestamp=stamp))])


def backend(core: FakeCore) -> ClusterBackend:
    cluster = SimpleNamespace(namespace="team-a", core=core, call=lambda action, fn: fn())
    return ClusterBackend(cluster)  # type: ignore[arg-type]


@pytest.mark.parametrize(("deleting", "fail", "expected"), [(True, False, True), (False, False, False),
                                                             (None, False, False), (True, True, False)])
def test_own_pod_deleted(monkeypatch: pytest.MonkeyPatch, deleting: bool | None, fail: bool, expected: bool) -> None:
    monkeypatch.setenv(POD_NAME_ENV, "train-x7k2p-train-tf-1234")
    core = FakeCore(deleting, fail)
    assert backend(core).own_pod_deleted() is expected
    assert core.asked == [("team-a", "metadata.name=train-x7k2p-train-tf-1234")]


def test_outside_such_a_pod_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POD_NAME_ENV, raising=False)
    core = FakeCore(True)
    assert backend(core).own_pod_deleted() is False and core.asked == []
