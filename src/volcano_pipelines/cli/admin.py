"""`vpipe pv reuse` and `vpipe namespace prepare`: flags in, one admin step call
(steps/_admin.py), output.

    vpipe pv reuse PV --for PVC [-n NS]
        re-bind a Released PersistentVolume (reclaimPolicy Retain: a dataset, checkpoints) to
        one named claim: its claimRef names the claim, with the old claim's uid and
        resourceVersion cleared, so the PV controller binds it to that claim and no other.
    vpipe namespace prepare NS [NS ...] --pull-secret-from SRC_NS/SECRET
        copy the registry pull secret into each algorithm team's namespace; re-running it
        changes nothing unless the source changed."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from volcano_pipelines.cli import command_help
from volcano_pipelines.errors import EXIT_OK
from volcano_pipelines.steps import Connection, namespace_prepare, pv_reuse
from volcano_pipelines.interface.params import gather, group_fields

__all__ = ["register"]


# --- command line ----------------------------------------------------------------------------


def _cluster_flags(parser: argparse.ArgumentParser) -> None:
    for name, _, _, doc in group_fields(Connection):
        parser.add_argument(f"--{name}", help=doc.help)
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pv = subparsers.add_parser("pv", help=command_help("pv"))
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

    ns = subparsers.add_parser("namespace", help=command_help("namespace"))
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
    result = pv_reuse(args.pv, args.claim, namespace=args.namespace,
                      connection=gather(Connection, vars(args)))
    what = "now pre-bound to" if result["changed"] else "already pre-bound to"
    _print(result, args.json, f"PersistentVolume {result['pv']} {what} {result['claim']} (phase {result['phase']})")
    return EXIT_OK


def _namespace_prepare(args: argparse.Namespace) -> int:
    results = namespace_prepare(args.namespaces, args.pull_secret_from,
                                connection=gather(Connection, vars(args)))
    _print(results, args.json, "\n".join(f"{r['namespace']}/{r['secret']}: {r['action']}" for r in results))
    return EXIT_OK


if __name__ == "__main__":
    from volcano_pipelines.cli import main

    sys.exit(main())
