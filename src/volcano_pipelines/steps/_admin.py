"""Two platform-admin steps (they need more than the vpipe-runner ServiceAccount has; see
manifests/README.md): re-bind a Released PersistentVolume to one named claim (`pv_reuse`),
and copy the registry pull secret into algorithm teams' namespaces (`namespace_prepare`).
The object edits are pure functions (`reuse_claim_ref`, `secret_copy`); the cluster calls go
through the generic client (k8s.client)."""

from __future__ import annotations

from functools import partial
from typing import Any

from volcano_pipelines.errors import InputError
from volcano_pipelines.objects.validate import check_dns_label, check_dns_subdomain
from volcano_pipelines.k8s.connection import Connection

__all__ = ["COPIED_FROM", "namespace_prepare", "pv_reuse", "reuse_claim_ref", "secret_copy"]

COPIED_FROM = "volcano-pipelines/copied-from"
REUSABLE_PHASES = ("Released", "Available")


# --- pure ------------------------------------------------------------------------------------


def reuse_claim_ref(pv: dict[str, Any], namespace: str, claim: str) -> dict[str, Any] | None:
    """The merge patch that pre-binds `pv` to namespace/claim, or None when it already is.
    Refuses (InputError) a PV that is Bound or in another phase that cannot be re-bound."""
    name = pv["metadata"]["name"]
    phase = (pv.get("status") or {}).get("phase", "")
    ref = pv["spec"].get("claimRef") or {}
    same = (ref.get("namespace"), ref.get("name")) == (namespace, claim)
    if same and (phase == "Bound" or not ref.get("uid")):
        return None  # bound to that claim already, or pre-bound and waiting for it
    if phase not in REUSABLE_PHASES:
        bound = f" (it is {phase} to {ref.get('namespace')}/{ref.get('name')})" if ref else f" (it is {phase})"
        raise InputError("PV", name, f"a Released or Available PersistentVolume{bound}")
    # Also for a claim of the same name: the new claim is another object (another uid).
    return {"spec": {"claimRef": {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": claim,
        "uid": None, "resourceVersion": None,
    }}}


def secret_copy(source: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The copy of a Secret for another namespace: type, data and labels; nothing that
    belongs to the original (uid, resourceVersion, owners, managed fields)."""
    meta = source["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": meta["name"],
            "namespace": namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": {COPIED_FROM: f"{meta['namespace']}/{meta['name']}"},
        },
        "type": source.get("type", "Opaque"),
        "data": dict(source.get("data") or {}),
    }


def _same_secret(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a.get("type"), a.get("data") or {}, (a["metadata"].get("labels") or {})) == \
        (b.get("type"), b.get("data") or {}, (b["metadata"].get("labels") or {}))


# --- against the cluster ---------------------------------------------------------------------


def pv_reuse(pv_name: str, claim: str, *, namespace: str | None = None,
             connection: Connection = Connection()) -> dict[str, Any]:
    from volcano_pipelines.k8s.errors import NotFound

    check_dns_subdomain("PV", pv_name)
    check_dns_subdomain("--for", claim)
    if namespace is not None:
        check_dns_label("--namespace", namespace)
    cluster = connection.connect()
    namespace = namespace or cluster.namespace
    try:
        pv = cluster.to_dict(cluster.call(f"read PersistentVolume {pv_name}",
                                          lambda: cluster.core.read_persistent_volume(pv_name)))
    except NotFound:
        raise InputError("PV", pv_name, "an existing PersistentVolume") from None
    patch = reuse_claim_ref(pv, namespace, claim)
    if patch is not None:
        pv = cluster.to_dict(cluster.call(
            f"rewrite the claimRef of PersistentVolume {pv_name}",
            lambda: cluster.core.patch_persistent_volume(pv_name, patch)))
    return {"pv": pv_name, "claim": f"{namespace}/{claim}", "changed": patch is not None,
            "phase": (pv.get("status") or {}).get("phase", "")}


def namespace_prepare(namespaces: list[str], pull_secret_from: str, *,
                      connection: Connection = Connection()) -> list[dict[str, Any]]:
    from volcano_pipelines.k8s.errors import Conflict, NotFound

    source_ns, sep, secret_name = pull_secret_from.partition("/")
    if not sep:
        raise InputError("--pull-secret-from", pull_secret_from, "NAMESPACE/SECRET")
    check_dns_label("--pull-secret-from", source_ns)
    check_dns_subdomain("--pull-secret-from", secret_name)
    for namespace in namespaces:
        check_dns_label("NAMESPACE", namespace)
    cluster = connection.connect()
    core = cluster.core
    try:
        source = cluster.to_dict(cluster.call(f"read secret {pull_secret_from}",
                                              lambda: core.read_namespaced_secret(secret_name, source_ns)))
    except NotFound:
        raise InputError("--pull-secret-from", pull_secret_from, "an existing secret") from None
    for namespace in namespaces:  # all checked before anything is written
        try:
            cluster.call(f"read namespace {namespace}", partial(core.read_namespace, namespace))
        except NotFound:
            raise InputError("NAMESPACE", namespace, "an existing namespace") from None
    out = []
    for namespace in namespaces:
        if namespace == source_ns:
            out.append({"namespace": namespace, "secret": secret_name, "action": "source"})
            continue
        copy = secret_copy(source, namespace)
        try:
            cluster.call(f"create secret {namespace}/{secret_name}",
                         partial(core.create_namespaced_secret, namespace, copy))
            action = "created"
        except Conflict:
            existing = cluster.to_dict(cluster.call(
                f"read secret {namespace}/{secret_name}",
                partial(core.read_namespaced_secret, secret_name, namespace)))
            if _same_secret(existing, copy):
                action = "unchanged"
            else:
                copy["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                cluster.call(f"replace secret {namespace}/{secret_name}",
                             partial(core.replace_namespaced_secret, secret_name, namespace, copy))
                action = "updated"
        out.append({"namespace": namespace, "secret": secret_name, "action": action})
    return out
