"""The shipped RBAC against a real API server: the kustomize base rendered for a namespace, the
accesses its rules grant, installing it for a test, a kubeconfig with a real ServiceAccount
token, and the accesses the audit log shows."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import yaml
from kubernetes import client

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "base"
SERVICE_ACCOUNT = "vpipe-runner"
Access = tuple[str, str, str, str]  # verb, API group, resource, subresource


# The lifecycle steps' Role is proven the same way by tests/integration/test_rbac_lifecycle.py.
OTHER_STEPS = ("role-lifecycle.yaml",)


# Queue reading is cluster-scoped: the ClusterRole is in manifests/cluster, its binding (named
# after the namespace) in each overlay; the dev overlay's stands for every namespace's.
QUEUE_READER = (MANIFESTS.parent / "cluster" / "clusterrole-queues.yaml",
                MANIFESTS.parent / "overlays" / "dev" / "namespaced" / "clusterrolebinding-queues.yaml")


def manifests(namespace: str, exclude: tuple[str, ...] = OTHER_STEPS) -> list[dict[str, Any]]:
    """The kustomize base as kustomize would render it for `namespace`, with the queue
    reader's ClusterRole and binding (cluster-scoped objects get a per-test name so tests do
    not share them), without `exclude` (file names of the base)."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    objects = []
    files = [MANIFESTS / name for name in kustomization["resources"] if name not in exclude] + list(QUEUE_READER)
    for path in files:
        for obj in yaml.safe_load_all(path.read_text()):
            if obj["kind"].startswith("Cluster"):
                obj["metadata"]["name"] = f"{obj['metadata']['name']}-{namespace}"
                if obj["kind"] == "ClusterRoleBinding":
                    obj["roleRef"]["name"] = f"{obj['roleRef']['name']}-{namespace}"
            else:
                obj["metadata"]["namespace"] = namespace
            for subject in obj.get("subjects", []):
                subject["namespace"] = namespace
            objects.append(obj)
    return objects


def granted(objects: list[dict[str, Any]]) -> set[Access]:
    """Every access the Role and ClusterRole rules grant, expanded."""
    out: set[Access] = set()
    for obj in objects:
        for rule in obj.get("rules", []):
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    name, _, sub = resource.partition("/")
                    out |= {(verb, group, name, sub) for verb in rule["verbs"]}
    return out


def apply(api: client.ApiClient, obj: dict[str, Any]) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    create = {
        "ServiceAccount": lambda o: core.create_namespaced_service_account(o["metadata"]["namespace"], o),
        "Role": lambda o: rbac.create_namespaced_role(o["metadata"]["namespace"], o),
        "RoleBinding": lambda o: rbac.create_namespaced_role_binding(o["metadata"]["namespace"], o),
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
    }[obj["kind"]]
    create(obj)


def token_kubeconfig(cluster: Any, namespace: str, service_account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount with a real bound token, its
    context's namespace set as a pipeline pod's would be."""
    api = cluster.api_client()
    request = client.CoreV1Api(api).create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"audiences": [], "expirationSeconds": 3600}}
    )
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": server["cluster"]}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", "namespace": namespace}}],
        "users": [{"name": "sa", "user": {"token": request.status.token}}],
    }))
    return path


@contextmanager
def installed(cluster: Any, namespace: str, objects: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The objects applied for the test; the cluster-scoped ones removed afterwards (the
    namespaced ones go with the test's namespace)."""
    api = cluster.api_client()
    for obj in objects:
        apply(api, obj)
    try:
        yield objects
    finally:
        delete_cluster_scoped(api, objects)


def delete_cluster_scoped(api: client.ApiClient, objects: list[dict[str, Any]]) -> None:
    """The ClusterRoles and ClusterRoleBindings among `objects` (namespaced ones go with the test's namespace)."""
    rbac = client.RbacAuthorizationV1Api(api)
    for obj in objects:
        if obj["kind"] == "ClusterRole":
            rbac.delete_cluster_role(obj["metadata"]["name"])
        elif obj["kind"] == "ClusterRoleBinding":
            rbac.delete_cluster_role_binding(obj["metadata"]["name"])


def audited(audit_log: Path, user: str) -> dict[Access, set[str]]:
    """(verb, group, resource, subresource) -> the decisions the API server logged for `user`."""
    seen: dict[Access, set[str]] = {}
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef")
        if event.get("stage") != "ResponseComplete" or event["user"].get("username") != user or not ref:
            continue  # non-resource requests (discovery) are allowed to every authenticated user
        key = (event["verb"], ref.get("apiGroup", ""), ref["resource"], ref.get("subresource", ""))
        seen.setdefault(key, set()).add(event.get("annotations", {}).get("authorization.k8s.io/decision", "?"))
    return seen


def created_by_apply(audit_log: Path, user: str) -> set[tuple[str, str, str, str]]:
    """(verb, group, resource, subresource) of `user`'s patches that created their object."""
    out = set()
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (event.get("stage") == "ResponseComplete" and event["user"].get("username") == user and event["verb"] == "patch"
                and (event.get("responseStatus") or {}).get("code") == 201):
            out.add(("patch", ref.get("apiGroup", ""), ref["resource"], ref.get("subresource", "")))
    return out
