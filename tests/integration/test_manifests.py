"""manifests/ (kustomize): rendered the way `kubectl apply -k` renders it, and accepted by the
real API server (server-side dry run, strict field validation: a misspelled field is an
error, not silently pruned).

kustomize itself may be missing where the tests run, so `render` is a small renderer for the
features manifests/ uses and nothing more: `resources` (files and directories), `patches`
(`path:` strategic-merge patches of maps, matched by kind and name) and `namespace` (on
namespaced kinds, renaming a Namespace object, and on ServiceAccount subjects of bindings
whose namespace is empty or `default`, as kustomize does). Where kustomize is available
(`kustomize` or `kubectl kustomize`), a test checks that both render the same objects."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_argo_server_side import argo_crds, dry_run_create  # noqa: F401 - fixture

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
OVERLAYS = ("dev", "prod")
FEATURES = {"apiVersion", "kind", "resources", "patches", "namespace"}
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
    for patch_entry in kustomization.get("patches", []):
        for patch in _load(directory / patch_entry["path"]):
            matches = [i for i, o in enumerate(objects)
                       if o["kind"] == patch["kind"] and o["metadata"]["name"] == patch["metadata"]["name"]]
            assert len(matches) == 1, f"patch {patch['kind']}/{patch['metadata']['name']} matches {len(matches)} objects"
            objects[matches[0]] = _merge(objects[matches[0]], patch)
    if namespace:
        objects = [_set_namespace(o, namespace) for o in objects]
    return objects


def _set_namespace(obj: Obj, namespace: str) -> Obj:
    obj = copy.deepcopy(obj)
    if obj["kind"] == "Namespace":
        obj["metadata"]["name"] = namespace
    elif obj["kind"] not in CLUSTER_SCOPED:
        obj["metadata"]["namespace"] = namespace
    if obj["kind"] in BINDINGS:
        for subject in obj.get("subjects", []):
            if subject["kind"] == "ServiceAccount" and subject.get("namespace", "") in ("", "default"):
                subject["namespace"] = namespace
    return obj


def _key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _by_key(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    out = {_key(o): o for o in objects}
    assert len(out) == len(objects), "two objects with one kind, namespace and name"
    return out


def _kustomize() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        probe = subprocess.run(["kubectl", "kustomize", "--help"], capture_output=True, check=False)
        if probe.returncode == 0:
            return ["kubectl", "kustomize"]
    return None


# --- rendering ---------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_every_piece_into_its_namespace(overlay: str) -> None:
    objects = _by_key(render(MANIFESTS / "overlays" / overlay))
    namespace = f"vpipe-{overlay}"
    kinds = {k[0] for k in objects}
    assert {"Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "Queue",
            "PriorityClass", "StorageClass", "PersistentVolumeClaim", "WorkflowTemplate"} <= kinds
    assert ("Namespace", "", namespace) in objects
    for (kind, ns, name), obj in objects.items():
        if kind in CLUSTER_SCOPED or kind == "Queue":
            assert ns == "", f"{kind}/{name} is cluster-scoped but got namespace {ns}"
        else:
            assert ns == namespace, f"{kind}/{name} in {ns!r}"
        for subject in obj.get("subjects", []):
            # Every binding grants the ServiceAccount of this overlay's namespace.
            assert (subject["name"], subject["namespace"]) == ("vpipe-runner", namespace), (kind, name, subject)
    data = objects[("PersistentVolumeClaim", namespace, "vpipe-data")]
    assert data["spec"]["accessModes"] == ["ReadWriteMany"]
    assert data["spec"]["storageClassName"] == objects[("StorageClass", "", "vpipe-glusterfs")]["metadata"]["name"]
    queue = objects[("Queue", "", "vpipe")]
    assert queue["spec"]["reclaimable"] is True  # from the base, kept by the overlay's patch


def test_overlays_differ_in_size_not_in_shape() -> None:
    dev, prod = (_by_key(render(MANIFESTS / "overlays" / o)) for o in OVERLAYS)
    assert {(k, n) for k, _, n in dev if k != "Namespace"} == {(k, n) for k, _, n in prod if k != "Namespace"}

    def size(objects: dict[tuple[str, str, str], Obj], ns: str) -> str:
        return str(objects[("PersistentVolumeClaim", ns, "vpipe-data")]["spec"]["resources"]["requests"]["storage"])

    assert (size(dev, "vpipe-dev"), size(prod, "vpipe-prod")) == ("10Gi", "2Ti")


def test_argo_executor_can_report_results_and_the_pipeline_names_what_manifests_create() -> None:
    from volcano_pipelines.argo import templates

    objects = _by_key(render(MANIFESTS / "overlays" / "prod"))
    role = objects[("Role", "vpipe-prod", "vpipe-argo-executor")]
    assert role["rules"] == [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
                              "verbs": ["create", "patch"]}]
    assert ("ServiceAccount", "vpipe-prod", templates.SERVICE_ACCOUNT) in objects
    for param, value in templates.PIPELINE_DEFAULTS.items():
        kind = "Queue" if param == "queue" else "PersistentVolumeClaim"
        assert (kind, "" if kind == "Queue" else "vpipe-prod", value) in objects, param


def test_the_registry_secret_is_a_template_without_credentials() -> None:
    (secret,) = render(MANIFESTS / "registry-secret")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["stringData"] == {".dockerconfigjson": '{"auths": {}}'}
    for overlay in OVERLAYS:  # re-applying an overlay never overwrites real credentials
        assert all(o["kind"] != "Secret" for o in render(MANIFESTS / "overlays" / overlay))


@pytest.mark.parametrize("directory", ["overlays/dev", "overlays/prod", "base", "registry-secret"])
def test_renderer_agrees_with_kustomize(directory: str) -> None:
    command = _kustomize()
    if command is None:
        pytest.skip("neither kustomize nor kubectl is installed: the renderer is checked only against itself")
    out = subprocess.run([*command, str(MANIFESTS / directory)], capture_output=True, text=True, check=True).stdout
    theirs = _by_key([d for d in yaml.safe_load_all(out) if d])
    ours = _by_key(render(MANIFESTS / directory))
    assert sorted(theirs) == sorted(ours)
    for key, obj in ours.items():
        assert obj == theirs[key], key


# --- the API server accepts them ---------------------------------------------------------


@pytest.mark.integration
@pytest.mark.usefixtures("argo_crds")
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_is_accepted_by_the_api_server(cluster: Any, namespace: str, overlay: str) -> None:
    """Every object, server-side dry run with strict field validation. Namespaced objects go
    to the test's namespace (a dry run cannot create into the overlay's own, which does not
    exist yet); the Namespace object itself is dry-run as rendered."""
    objects = render(MANIFESTS / "overlays" / overlay)
    for obj in objects:
        if "namespace" in obj["metadata"]:
            obj["metadata"]["namespace"] = namespace
        created = dry_run_create(cluster, obj)
        assert created["metadata"]["name"] == obj["metadata"]["name"]
    kinds = sorted({o["kind"] for o in objects})
    assert "Queue" in kinds and "WorkflowTemplate" in kinds, kinds


@pytest.mark.integration
def test_registry_secret_template_is_accepted(cluster: Any, namespace: str) -> None:
    (secret,) = render(MANIFESTS / "registry-secret")
    secret["metadata"]["namespace"] = namespace
    assert dry_run_create(cluster, secret)["type"] == "kubernetes.io/dockerconfigjson"
