"""serve() without a cluster: an in-memory apps/v1 API answering as the Deployment controller
would (every call recorded), the rollouts it reports, and a progress that keeps its notes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from volcano_pipelines.objects.rollout import TEMPLATE_HASH_ANNOTATION, Rollout
from volcano_pipelines.progress import Progress

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


DONE = Rollout(True, False, "rolled out")
FAILED = Rollout(False, True, "pod model-abc: ImagePullBackOff")


class Notes(Progress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, line: str) -> None:
        self.lines.append(line)


def _export(root: Path, *versions: str) -> Path:
    for version in versions:
        (root / version / "variables").mkdir(parents=True)
        (root / version / "saved_model.pb").write_bytes(b"pb")
    return root


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
