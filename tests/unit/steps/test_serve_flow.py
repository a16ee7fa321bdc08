"""serve() end to end without a cluster: the Kubernetes side is an in-memory apps API (get /
apply / patch / rollout wait, answered as the Deployment controller would, every call
recorded), TF Serving's REST API is the stand-in HTTP server. What only a cluster run showed
before: a failed rollout or smoke test rolls back to the previous pod template, and "the old
version AVAILABLE, the new one still LOADING" is not served yet."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.clock import VirtualClock
from tests.unit.kube.tfserving_standin import standin, status_body
from volcano_pipelines.k8s import apps
from volcano_pipelines.k8s import client as k8s_client
from volcano_pipelines.kube.rollout import TEMPLATE_HASH_ANNOTATION, Rollout
from volcano_pipelines.steps import _serve as serving
from volcano_pipelines.steps._serve import serve

NS = "ns"
OLD_TEMPLATE = {"metadata": {"annotations": {TEMPLATE_HASH_ANNOTATION: "old-hash"}, "labels": {"app": "old"}},
                "spec": {"containers": [{"name": "serving", "image": "tensorflow/serving:old"}]}}


class FakeCluster:
    namespace = NS


class FakeApps:
    """apps/v1 as serve() uses it. `rollouts` answers each wait_for_rollout in turn. Every call
    must go to the one cluster connect() returned; each rollout wait reports a line through
    its on_change, as the real watch does."""

    def __init__(self, previous: dict[str, Any] | None, rollouts: list[Rollout]) -> None:
        self.cluster = FakeCluster()
        self.connected: list[tuple[Any, ...]] = []  # connect()'s (kubeconfig, context)
        self.checked: list[dict[str, Any]] = []  # the objects check_all() validated
        self.deployment = copy.deepcopy(previous)
        self.rollouts = list(rollouts)
        self.calls: list[tuple[Any, ...]] = []
        self.pvc_exists = True
        self.applied: list[dict[str, Any]] = []  # every object apply() got, as sent
        self.rollout_kwargs: list[dict[str, Any]] = []

    def connect(self, *args: Any) -> FakeCluster:
        self.connected.append(args)
        return self.cluster

    def check_all(self, cluster: Any, objs: list[dict[str, Any]]) -> None:
        assert cluster is self.cluster
        self.checked += copy.deepcopy(objs)

    def get(self, cluster: Any, api: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        assert cluster is self.cluster
        self.calls.append(("get", kind, ns, name))
        assert api == {"PersistentVolumeClaim": "v1", "Deployment": "apps/v1"}[kind]
        if kind == "PersistentVolumeClaim":
            if not self.pvc_exists:
                return None
            return {"metadata": {"name": name, "namespace": ns}}
        if kind == "Deployment":
            return copy.deepcopy(self.deployment)
        return None

    def apply(self, cluster: Any, obj: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert cluster is self.cluster
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"]))
        self.applied.append(copy.deepcopy(obj))
        applied = copy.deepcopy(obj)
        applied["metadata"]["uid"] = f"uid-{obj['kind']}"
        if obj["kind"] == "Deployment":
            self.deployment = copy.deepcopy(applied)
        return applied

    def patch(self, cluster: Any, api: str, kind: str, ns: str, name: str, body: Any, **kw: Any) -> dict[str, Any]:
        self.calls.append(("patch", kind, name))
        assert cluster is self.cluster and api == "apps/v1" and ns == NS
        assert kw.get("json_patch") and body[0]["path"] == "/spec/template" and body[0]["op"] == "replace"
        assert self.deployment is not None
        self.deployment["spec"]["template"] = copy.deepcopy(body[0]["value"])
        return copy.deepcopy(self.deployment)

    def wait_for_rollout(self, cluster: Any, ns: str, name: str, *, template_hash: str, **kw: Any) -> Rollout:
        assert cluster is self.cluster
        self.calls.append(("wait", template_hash))
        self.rollout_kwargs.append({"namespace": ns, "name": name, **kw})
        if kw.get("on_change") is not None:
            kw["on_change"](f"deployment {ns}/{name}: rollout of {template_hash} under way")
        assert self.deployment is not None
        annotations = self.deployment["spec"]["template"].get("metadata", {}).get("annotations", {})
        assert annotations.get(TEMPLATE_HASH_ANNOTATION, "") == template_hash
        return self.rollouts.pop(0)

    def template(self) -> dict[str, Any]:
        assert self.deployment is not None
        return self.deployment["spec"]["template"]


def previous_deployment() -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "model", "namespace": NS, "uid": "u0"},
            "spec": {"template": copy.deepcopy(OLD_TEMPLATE)}}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def make(previous: dict[str, Any] | None, rollouts: list[Rollout]) -> FakeApps:
        api = FakeApps(previous, rollouts)
        monkeypatch.setattr(k8s_client, "connect", api.connect)
        for name in ("get", "apply", "patch", "wait_for_rollout", "check_all"):
            monkeypatch.setattr(apps, name, getattr(api, name))
        # TF Serving's status asked every 50 ms instead of every 2 s: the same answers, sooner;
        # and on a clock that moves only when the wait sleeps, so a model that never comes up
        # costs its ~20 real requests, not the second of real time its timeout names.
        clock = VirtualClock()
        monkeypatch.setattr(serving, "wait_model_available",
                            functools.partial(serving.wait_model_available, interval=0.05, clock=clock,
                                              sleep=clock.sleep))
        return api

    return make


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """A model directory with versions 1 and 2 (2 is the new one)."""
    for version in ("1", "2"):
        (tmp_path / "export" / version / "variables").mkdir(parents=True)
        (tmp_path / "export" / version / "saved_model.pb").write_bytes(b"pb")
    return tmp_path / "export"


DONE = Rollout(True, False, "rolled out")
FAILED = Rollout(False, True, "pod model-abc: ImagePullBackOff")
SERVED = status_body((1, "AVAILABLE"), (2, "AVAILABLE"))


def _serve(url: str, export: Path | None = None, **kw: Any):  # type: ignore[no-untyped-def]
    return serve("model", pvc="logs", rest_url=url, model_dir_local=str(export) if export else None, timeout=1, **kw)


def test_a_good_rollout_serves_the_new_version_and_smoke_tests_it(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api = fake(None, [DONE])
    with standin("model", [(200, SERVED)]) as tfs:
        result = _serve(tfs.url, export, smoke_payload='{"instances": [[1.0]]}')
    assert result.succeeded and not result.rolled_back and result.created, result.message
    assert result.version == 2 and result.served_versions == [1, 2]
    assert result.smoke_test == {"status": 200, "ok": True, "detail": "predictions returned"}
    assert ("POST", "/v1/models/model:predict", {"instances": [[1.0]]}) in tfs.requests
    assert [c[0] for c in api.calls].count("patch") == 0


def test_a_failed_smoke_test_rolls_back_to_the_previous_template(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api = fake(previous_deployment(), [DONE, DONE])
    with standin("model", [(200, SERVED)], predict=(400, {"error": "bad input"})) as tfs:
        result = _serve(tfs.url, export, smoke_payload='{"instances": [[1.0]]}')
    assert not result.succeeded and result.rolled_back
    assert "smoke test failed (HTTP 400): bad input" in (result.message or "")
    assert "rolled back to the previous revision" in (result.message or "")
    assert ("patch", "Deployment", "model") in api.calls and api.calls[-1] == ("wait", "old-hash")
    assert api.template() == OLD_TEMPLATE


def test_a_failed_rollout_rolls_back_without_asking_tf_serving(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api = fake(previous_deployment(), [FAILED, DONE])
    with standin("model", [(200, SERVED)]) as tfs:
        result = _serve(tfs.url, export)
    assert not result.succeeded and result.rolled_back and tfs.requests == []
    assert (result.message or "").startswith("rollout failed: pod model-abc: ImagePullBackOff; rolled back")
    assert api.template() == OLD_TEMPLATE and api.calls[-1] == ("wait", "old-hash")


def test_without_a_previous_revision_nothing_is_rolled_back(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api = fake(None, [FAILED])
    with standin("model", [(200, SERVED)]) as tfs:
        result = _serve(tfs.url, export)
    assert not result.succeeded and not result.rolled_back
    assert "no previous revision to roll back to" in (result.message or "")
    assert not any(c[0] == "patch" for c in api.calls)


def test_the_old_version_available_and_the_new_one_loading_is_not_served(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    """TF Serving keeps serving version 1 while version 2 loads: the new model is not there
    yet, and it never gets there within the timeout: the step fails and rolls back."""
    api = fake(previous_deployment(), [DONE, DONE])
    loading = status_body((1, "AVAILABLE"), (2, "LOADING"))
    with standin("model", [(200, loading)]) as tfs:
        result = _serve(tfs.url, export)
    assert not result.succeeded and result.rolled_back, result.message
    assert "model model is not served" in (result.message or "") and "waiting for version(s) 2" in (result.message or "")
    assert result.served_versions == [1]
    assert api.template() == OLD_TEMPLATE


def test_the_new_version_coming_up_after_a_while_is_served(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    fake(None, [DONE])
    loading = status_body((1, "AVAILABLE"), (2, "LOADING"))
    with standin("model", [(200, loading), (200, SERVED)]) as tfs:
        result = _serve(tfs.url, export)
    assert result.succeeded and result.version == 2, result.message


def test_without_the_model_directory_any_available_version_counts(fake) -> None:  # type: ignore[no-untyped-def]
    """The step cannot know the newest version without seeing the directory: "latest" is
    whatever TF Serving reports AVAILABLE."""
    fake(None, [DONE])
    with standin("model", [(200, status_body((7, "AVAILABLE")))]) as tfs:
        result = _serve(tfs.url)
    assert result.succeeded and result.version == 7
