"""The KFP permissions (manifests/kfp, as manifests/overlays/kfp composes it) against the API
server's own RBAC authorizer. KFP v2 runs every step pod as the run's ServiceAccount
(`pipeline-runner` single-user, `default-editor` in a profile namespace); those accounts are
KFP's, so the test creates them as KFP's install would. For each of them, a
SubjectAccessReview asks the authorizer about every grant of vpipe-train (train, the exit
handler), vpipe-lifecycle (reap, tensorboard, serve) and the queue reader: all allowed. What
no Role grants, and every grant in another namespace, is denied, and an account of the same
namespace that nothing binds is denied too (so the allows come from these bindings, not from
a permissive set-up). That both Roles are exactly what the steps use is proven by
test_rbac.py and test_rbac_lifecycle.py from the audit log."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.helpers.manifests import KFP_ACCOUNTS, MANIFESTS, render
from tests.helpers.rbac import Access, granted, installed

pytestmark = pytest.mark.integration

OVERLAY_NAMESPACE = "kubeflow"


def kfp_objects(namespace: str) -> list[dict[str, Any]]:
    """The RBAC objects of manifests/overlays/kfp moved from `kubeflow` to the test's namespace
    (cluster-scoped ones renamed per test so tests do not share them), plus KFP's accounts."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        for name in KFP_ACCOUNTS
    ]
    for obj in render(MANIFESTS / "overlays" / "kfp"):
        if obj["kind"] not in {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}:
            continue
        if obj["kind"] == "ClusterRole" and obj["metadata"]["name"] != "vpipe-queue-reader":
            continue
        if obj["kind"].startswith("Cluster"):
            obj["metadata"]["name"] = f"{obj['metadata']['name']}-{namespace}"
            if obj["kind"] == "ClusterRoleBinding":
                obj["roleRef"]["name"] = f"{obj['roleRef']['name']}-{namespace}"
        else:
            assert obj["metadata"]["namespace"] == OVERLAY_NAMESPACE
            obj["metadata"]["namespace"] = namespace
        for subject in obj.get("subjects", []):
            if "namespace" in subject:  # RoleBinding subjects without one are the binding's namespace's
                assert subject["namespace"] == OVERLAY_NAMESPACE
                subject["namespace"] = namespace
        objects.append(obj)
    return objects


def allowed(api: client.ApiClient, namespace: str, account: str, access: Access, *, scope: str | None) -> bool:
    verb, group, resource, sub = access
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{namespace}:{account}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(verb=verb, group=group, resource=resource,
                                                        subresource=sub or None, namespace=scope)))
    return bool(client.AuthorizationV1Api(api).create_subject_access_review(review).status.allowed)


def test_kfp_accounts_get_every_step_grant_and_nothing_else(cluster: Any, namespace: str) -> None:
    objects = kfp_objects(namespace)
    roles = [o for o in objects if o["kind"] == "Role"]
    assert {o["metadata"]["name"] for o in roles} == {"vpipe-train", "vpipe-lifecycle"}
    namespaced = granted(roles)
    queues = granted([o for o in objects if o["kind"] == "ClusterRole"])
    assert ("create", "batch.volcano.sh", "jobs", "") in namespaced  # train
    assert ("create", "apps", "deployments", "") in namespaced  # tensorboard, serve: 403 before
    assert ("patch", "apps", "deployments", "scale") in namespaced  # reap
    assert queues == {("get", "scheduling.volcano.sh", "queues", ""), ("list", "scheduling.volcano.sh", "queues", "")}
    not_granted: list[Access] = [("get", "", "secrets", ""), ("create", "", "pods", ""),
                                 ("delete", "", "persistentvolumeclaims", ""),
                                 ("create", "rbac.authorization.k8s.io", "rolebindings", "")]
    api = cluster.api_client()
    with installed(cluster, namespace, objects):
        for account in KFP_ACCOUNTS:
            refused = [a for a in sorted(namespaced) if not allowed(api, namespace, account, a, scope=namespace)]
            refused += [a for a in sorted(queues) if not allowed(api, namespace, account, a, scope=None)]
            assert refused == [], (account, refused)
            extra = [a for a in not_granted if allowed(api, namespace, account, a, scope=namespace)]
            elsewhere = [a for a in sorted(namespaced) if allowed(api, namespace, account, a, scope="default")]
            assert extra == [] and elsewhere == [], (account, extra, elsewhere)
            assert not allowed(api, namespace, account, ("create", "scheduling.volcano.sh", "queues", ""), scope=None)
        unbound = [a for a in sorted(namespaced) if allowed(api, namespace, "someone-else", a, scope=namespace)]
        assert unbound == [], unbound
