"""Two platform-admin helpers (they need more than the vpipe-runner ServiceAccount has; see
manifests/README.md):

    vpipe pv reuse PV --for PVC [-n NS]
        re-bind a Released PersistentVolume (reclaimPolicy Retain: a dataset, checkpoints) to
        one named claim: its claimRef names the claim, with the old claim's uid and
        resourceVersion cleared, so the PV controller binds it to that claim and no other.
    vpipe namespace prepare NS [NS ...] --pull-secret-from SRC_NS/SECRET
        copy the registry pull secret into each algorithm team's namespace; re-running it
        changes nothing unless the source changed.

The object edits are pure functions (`reuse_claim_ref`, `secret_copy`); the cluster calls
go through the generic client (k8s.client). Pending a step module of their own, they live
here."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from volcano_pipelines.errors import EXIT_OK, InputError
from volcano_pipelines.kube.validate import check_dns_label, check_dns_subdomain

__all__ = ["namespace_prepare", "pv_reuse", "register", "reuse_claim_ref", "secret_copy"]

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


def _connect(kubeconfig: str | None, context: str | None) -> Any:
    from volcano_pipelines.k8s.client import connect

    return connect(kubeconfig, context)


def pv_reuse(pv_name: str, claim: str, *, namespace: str | None = None, kubeconfig: str | None = None,
             context: str | None = None) -> dict[str, Any]:
    from volcano_pipelines.k8s.errors import NotFound

    check_dns_subdomain("PV", pv_name)
    check_dns_subdomain("--for", claim)
    if namespace is not None:
        check_dns_label("--namespace", namespace)
    cluster = _connect(kubeconfig, context)
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


def namespace_prepare(namespaces: list[str], pull_secret_from: str, *, kubeconfig: str | None = None,
                      context: str | None = None) -> list[dict[str, Any]]:
    from volcano_pipelines.k8s.errors import Conflict, NotFound

    source_ns, sep, secret_name = pull_secret_from.partition("/")
    if not sep:
        raise InputError("--pull-secret-from", pull_secret_from, "NAMESPACE/SECRET")
    check_dns_label("--pull-secret-from", source_ns)
    check_dns_subdomain("--pull-secret-from", secret_name)
    for namespace in namespaces:
        check_dns_label("NAMESPACE", namespace)
    cluster = _connect(kubeconfig, context)
    core = cluster.core
    try:
        source = cluster.to_dict(cluster.call(f"read secret {pull_secret_from}",
                                              lambda: core.read_namespaced_secret(secret_name, source_ns)))
    except NotFound:
        raise InputError("--pull-secret-from", pull_secret_from, "an existing secret") from None
    for namespace in namespaces:  # all checked before anything is written
        try:
            cluster.call(f"read namespace {namespace}", lambda ns=namespace: core.read_namespace(ns))
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
                         lambda ns=namespace, body=copy: core.create_namespaced_secret(ns, body))
            action = "created"
        except Conflict:
            existing = cluster.to_dict(cluster.call(
                f"read secret {namespace}/{secret_name}",
                lambda ns=namespace: core.read_namespaced_secret(secret_name, ns)))
            if _same_secret(existing, copy):
                action = "unchanged"
            else:
                copy["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                cluster.call(f"replace secret {namespace}/{secret_name}",
                             lambda ns=namespace, body=copy: core.replace_namespaced_secret(secret_name, ns, body))
                action = "updated"
        out.append({"namespace": namespace, "secret": secret_name, "action": action})
    return out


# --- command line ----------------------------------------------------------------------------


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def register(subparsers: argparse._SubParsersAction) -> None:
    pv = subparsers.add_parser("pv", help="admin: PersistentVolume helpers")
    pv_commands = pv.add_subparsers(dest="pv_command", required=True, parser_class=type(pv))
    reuse = pv_commands.add_parser(
        "reuse", help="re-bind a Released PersistentVolume to one named claim",
        description="Point a Released (or Available) PersistentVolume's claimRef at one claim, clearing the old "
                    "claim's uid: the PV controller then binds the PV to that claim only. Needs persistentvolumes "
                    "get/patch (an admin's, not vpipe-runner's).")
    reuse.add_argument("pv", metavar="PV", help="PersistentVolume name")
    reuse.add_argument("--for", dest="claim", required=True, metavar="PVC", help="the claim to bind it to")
    reuse.add_argument("-n", "--namespace", help="namespace of the claim (default: the context's)")
    _cluster_flags(reuse)
    reuse.set_defaults(handler=_pv_reuse, parser=reuse)

    ns = subparsers.add_parser("namespace", help="admin: namespace helpers")
    ns_commands = ns.add_subparsers(dest="namespace_command", required=True, parser_class=type(ns))
    prepare = ns_commands.add_parser(
        "prepare", help="copy the registry pull secret into algorithm namespaces (idempotent)",
        description="Copy SRC_NS/SECRET into each NAMESPACE (created, updated when the source changed, else "
                    "unchanged). Needs secrets get in SRC_NS and get/create/update in each NAMESPACE.")
    prepare.add_argument("namespaces", nargs="+", metavar="NAMESPACE", help="target namespace(s)")
    prepare.add_argument("--pull-secret-from", required=True, metavar="SRC_NS/SECRET",
                         help="the registry secret to copy")
    _cluster_flags(prepare)
    prepare.set_defaults(handler=_namespace_prepare, parser=prepare)


def _print(result: Any, as_json: bool, text: str) -> None:
    print(json.dumps(result, indent=2, sort_keys=True) if as_json else text)


def _pv_reuse(args: argparse.Namespace) -> int:
    result = pv_reuse(args.pv, args.claim, namespace=args.namespace, kubeconfig=args.kubeconfig, context=args.context)
    what = "now pre-bound to" if result["changed"] else "already pre-bound to"
    _print(result, args.json, f"PersistentVolume {result['pv']} {what} {result['claim']} (phase {result['phase']})")
    return EXIT_OK


def _namespace_prepare(args: argparse.Namespace) -> int:
    results = namespace_prepare(args.namespaces, args.pull_secret_from, kubeconfig=args.kubeconfig,
                                context=args.context)
    _print(results, args.json, "\n".join(f"{r['namespace']}/{r['secret']}: {r['action']}" for r in results))
    return EXIT_OK


if __name__ == "__main__":
    from volcano_pipelines.cli import main

    sys.exit(main())
