"""The shipped manifests rendered as kustomize would, without kustomize: the base, the overlays
and the KFP bindings."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"


FEATURES = {"apiVersion", "kind", "resources", "components", "patches", "namespace"}
KFP_ACCOUNTS = ("pipeline-runner", "default-editor")  # what KFP v2 runs step pods as
# The cluster-scoped kinds manifests/ uses that kustomize knows as such. A Volcano Queue is
# cluster-scoped too, but kustomize does not know it: never put it under a `namespace:`.
CLUSTER_SCOPED = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding", "StorageClass", "PriorityClass",
                            "PersistentVolume", "CustomResourceDefinition"})
BINDINGS = frozenset({"RoleBinding", "ClusterRoleBinding"})

Obj = dict[str, Any]


def _merge(target: Any, patch: Any) -> Any:
    """A strategic-merge patch of maps (lists are replaced; manifests/ patches no list)."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return copy.deepcopy(patch)
    out = dict(target)
    for key, value in patch.items():
        out[key] = _merge(target.get(key), value) if key in target else copy.deepcopy(value)
    return out


def _load(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(directory: Path, outer_namespace: str | None = None) -> list[Obj]:
    """`outer_namespace`: the namespace of a kustomization that includes this one. It wins,
    also for the subjects kustomize rewrites: kustomize remembers that a subject's namespace
    was empty or `default` before the inner kustomization set it."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - FEATURES
    assert not unknown, f"{directory}: the test renderer does not implement {sorted(unknown)}"
    namespace = outer_namespace or kustomization.get("namespace")
    objects: list[Obj] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        objects += render(path, namespace) if path.is_dir() else _load(path)
    for entry in kustomization.get("components", []):
        component = (directory / entry).resolve()
        assert yaml.safe_load((component / "kustomization.yaml").read_text())["kind"] == "Component", component
        objects += render(component, namespace)
    for patch_entry in kustomization.get("patches", []):
        for patch in _load(directory / patch_entry["path"]):
            matches = [i for i, o in enumerate(objects)
                       if o["kind"] == patch["kind"] and o["metadata"]["name"] == patch["metadata"]["name"]]
            assert len(matches) == 1, f"patch {patch['kind']}/{patch['metadata']['name']} matches {len(matches)} objects"
            objects[matches[0]] = _merge(objects[matches[0]], patch)
    if namespace and kustomization.get("kind") != "Component":  # a component takes its includer's namespace
        accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
        objects = [_set_namespace(o, namespace, accounts) for o in objects]
    return objects


def _set_namespace(obj: Obj, namespace: str, accounts: set[str]) -> Obj:
    obj = copy.deepcopy(obj)
    if obj["kind"] == "Namespace":
        obj["metadata"]["name"] = namespace
    elif obj["kind"] not in CLUSTER_SCOPED:
        obj["metadata"]["namespace"] = namespace
    if obj["kind"] in BINDINGS:
        for subject in obj.get("subjects", []):
            if (subject["kind"] == "ServiceAccount" and subject["name"] in accounts
                    and subject.get("namespace", "") in ("", "default")):
                subject["namespace"] = namespace
    return obj
