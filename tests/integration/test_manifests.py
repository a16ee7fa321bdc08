"""manifests/ (kustomize): rendered the way `kubectl apply -k` renders it, and accepted by the
real API server (server-side dry run, strict field validation: a misspelled field is an
error, not silently pruned).

kustomize itself may be missing where the tests run, so `render` is a small renderer for the
features manifests/ uses and nothing more: `resources` (files and directories), `components`
(a `kind: Component` directory whose resources join the including kustomization's before its
own patches and namespace), `patches` (`path:` strategic-merge patches of maps, matched by kind
and name) and `namespace` (on namespaced kinds, renaming a Namespace object, and on the
ServiceAccount subjects of bindings whose namespace is empty or `default` and that name a
ServiceAccount among the rendered objects, as kustomize does: a subject naming an account
from elsewhere, such as KFP's `pipeline-runner`, keeps what it says). Where kustomize is
available (`kustomize` or `kubectl kustomize`), a test checks that both render the same
objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.argo_crds import dry_run_create
from tests.helpers.manifests import CLUSTER_SCOPED, KFP_ACCOUNTS, MANIFESTS, Obj, render

OVERLAYS = ("dev", "prod")


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

    def shape(objects: dict[tuple[str, str, str], Obj], ns: str) -> set[tuple[str, str]]:
        return {(k, n.removesuffix(f"-{ns}")) for k, _, n in objects if k != "Namespace"}

    assert shape(dev, "vpipe-dev") == shape(prod, "vpipe-prod")

    def size(objects: dict[tuple[str, str, str], Obj], ns: str) -> str:
        return str(objects[("PersistentVolumeClaim", ns, "vpipe-data")]["spec"]["resources"]["requests"]["storage"])

    assert (size(dev, "vpipe-dev"), size(prod, "vpipe-prod")) == ("10Gi", "2Ti")


def test_overlays_never_fight_over_a_cluster_scoped_object() -> None:
    """Applying one overlay after another must not rewrite what the first one applied: every
    cluster-scoped object two overlays both render is the same object. The one exception is the
    Volcano Queue `vpipe`, whose size each overlay patches (manifests/README.md: on a cluster
    shared by environments, keep the queue patch of one of them). The queue-reading binding is
    per namespace (before: one ClusterRoleBinding/vpipe-queue-reader in the namespaced base,
    whose subjects the overlay applied last decided)."""
    overlays = {o: _by_key(render(MANIFESTS / "overlays" / o)) for o in [*OVERLAYS, "kfp"]}
    shared: dict[tuple[str, str], list[tuple[str, Obj]]] = {}
    for overlay, objects in overlays.items():
        for (kind, _ns, name), obj in objects.items():
            if kind in CLUSTER_SCOPED - {"Namespace"} or kind == "Queue":
                shared.setdefault((kind, name), []).append((overlay, obj))
    for (kind, name), found in shared.items():
        if (kind, name) == ("Queue", "vpipe"):
            continue
        assert all(obj == found[0][1] for _, obj in found), f"{kind}/{name} differs between {[o for o, _ in found]}"
    bindings = {o: [obj for (k, _, _), obj in objects.items() if k == "ClusterRoleBinding"]
                for o, objects in overlays.items()}
    for overlay, (binding,) in bindings.items():
        namespace = "kubeflow" if overlay == "kfp" else f"vpipe-{overlay}"
        assert binding["metadata"]["name"] == f"vpipe-queue-reader-{namespace}"
        assert binding["roleRef"]["name"] == "vpipe-queue-reader"
        assert {s["namespace"] for s in binding["subjects"]} == {namespace}, binding["subjects"]
    base = render(MANIFESTS / "base")
    assert not [o for o in base if o["kind"] in CLUSTER_SCOPED], "a cluster-scoped object in the namespaced base"


def _grants(objects: dict[tuple[str, str, str], Obj], namespace: str, account: str) -> set[str]:
    """The Roles in `namespace` bound to `account` of that namespace."""
    out = set()
    for (kind, ns, _), obj in objects.items():
        if kind == "RoleBinding" and ns == namespace:
            for subject in obj["subjects"]:
                # A RoleBinding's ServiceAccount subject without a namespace is one of the binding's.
                if subject["kind"] == "ServiceAccount" and subject["name"] == account \
                        and subject.get("namespace", ns) == namespace:
                    out.add(obj["roleRef"]["name"])
    return out


def test_kfp_overlay_binds_both_step_roles_to_kfps_accounts() -> None:
    """KFP v2 runs step pods as the run's ServiceAccount: reap, tensorboard and serve need
    vpipe-lifecycle as much as train needs vpipe-train (before: only vpipe-train and the queue
    reader were named, and the steps after training got 403)."""
    objects = _by_key(render(MANIFESTS / "overlays" / "kfp"))
    roles = {name for kind, ns, name in objects if kind == "Role" and ns == "kubeflow"}
    assert roles == {"vpipe-train", "vpipe-lifecycle"}
    for account in (*KFP_ACCOUNTS, "vpipe-runner"):
        assert _grants(objects, "kubeflow", account) == roles, account
    assert ("ClusterRole", "", "vpipe-queue-reader") in objects
    kinds = {kind for kind, _, _ in objects}
    assert "Namespace" not in kinds and "WorkflowTemplate" not in kinds  # KFP owns the namespace and its Argo
    assert ("PersistentVolumeClaim", "kubeflow", "vpipe-data") in objects


def test_kfp_component_follows_the_namespace_that_includes_it(tmp_path: Path) -> None:
    """A profile namespace of a multi-user KFP: base + the component, nothing else."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "namespace": "kubeflow-user-example-com",
        # Relative: kustomize refuses an absolute root.
        "resources": [os.path.relpath(MANIFESTS / "base", tmp_path)],
        "components": [os.path.relpath(MANIFESTS / "kfp", tmp_path)]}))
    objects = _by_key(render(tmp_path))
    for account in KFP_ACCOUNTS:
        assert _grants(objects, "kubeflow-user-example-com", account) == {"vpipe-train", "vpipe-lifecycle"}
    command = _kustomize()
    if command is not None:
        # The repository lies outside tmp_path: kustomize loads it only without its load restrictor.
        out = subprocess.run([*command, "--load-restrictor", "LoadRestrictionsNone", str(tmp_path)],
                             capture_output=True, text=True, check=True).stdout
        assert _by_key([d for d in yaml.safe_load_all(out) if d]) == objects


def test_argo_executor_can_report_results_and_the_pipeline_names_what_manifests_create() -> None:
    from volcano_pipelines.argo import templates

    objects = _by_key(render(MANIFESTS / "overlays" / "prod"))
    role = objects[("Role", "vpipe-prod", "vpipe-argo-executor")]
    assert role["rules"] == [{"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"],
                              "verbs": ["create", "patch"]}]
    assert ("ServiceAccount", "vpipe-prod", templates.SERVICE_ACCOUNT) in objects
    objects_named = {"queue": "Queue", "data-pvc": "PersistentVolumeClaim", "log-pvc": "PersistentVolumeClaim"}
    assert set(objects_named) <= set(templates.PIPELINE_DEFAULTS)
    for param, value in templates.PIPELINE_DEFAULTS.items():
        if param not in objects_named:
            continue  # a number (the training timeout), not an object manifests/ creates
        kind = objects_named[param]
        assert (kind, "" if kind == "Queue" else "vpipe-prod", value) in objects, param


def test_the_registry_secret_is_a_template_without_credentials() -> None:
    (secret,) = render(MANIFESTS / "registry-secret")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["stringData"] == {".dockerconfigjson": '{"auths": {}}'}
    for overlay in OVERLAYS:  # re-applying an overlay never overwrites real credentials
        assert all(o["kind"] != "Secret" for o in render(MANIFESTS / "overlays" / overlay))


@pytest.mark.parametrize("directory", ["overlays/dev", "overlays/prod", "overlays/kfp", "base", "cluster",
                                       "registry-secret"])
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
@pytest.mark.parametrize("overlay", [*OVERLAYS, "kfp"])
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
    assert "Queue" in kinds and ("WorkflowTemplate" in kinds) == (overlay != "kfp"), kinds


@pytest.mark.integration
def test_registry_secret_template_is_accepted(cluster: Any, namespace: str) -> None:
    (secret,) = render(MANIFESTS / "registry-secret")
    secret["metadata"]["namespace"] = namespace
    assert dry_run_create(cluster, secret)["type"] == "kubernetes.io/dockerconfigjson"
