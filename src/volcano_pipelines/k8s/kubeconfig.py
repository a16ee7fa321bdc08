"""Which namespace a request given none goes to, read from the kubeconfig with PyYAML alone:
`vpipe render` and every dry run show it without loading the Kubernetes client (render stays
light), and `connect` takes the namespace from here too, so what they show and where the real
submission goes cannot differ.

The files are merged as the Kubernetes Python client merges them (`KubeConfigMerger`): the
paths of $KUBECONFIG (or of the named kubeconfig) split on ':', missing ones skipped; the
first context of a name wins; a later file's current-context replaces an earlier one's."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["DEFAULT_NAMESPACE", "IN_CLUSTER_NAMESPACE_FILE", "check_named", "context_namespace", "default_namespace",
           "known_contexts", "read_contexts", "read_text"]

DEFAULT_NAMESPACE = "default"
IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace `connect` uses when none is named, read without connecting: the context's,
    the pod's own in a cluster, else `default`. A kubeconfig that cannot be read gives
    `default` here; `connect` reports it."""
    import yaml  # here, not at the top: `vpipe sync` imports this module and reads no kubeconfig

    try:
        if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST") and not context:
            return read_text(IN_CLUSTER_NAMESPACE_FILE) or DEFAULT_NAMESPACE
        return context_namespace(kubeconfig, context) or DEFAULT_NAMESPACE
    except (OSError, yaml.YAMLError, TypeError, AttributeError, ValueError):
        return DEFAULT_NAMESPACE


def check_named(kubeconfig: str | None, context: str | None) -> None:
    """A kubeconfig file or a context the user named that is not there is bad input (exit 2),
    said the same way by every command before anything is asked of a cluster: a file that does
    not exist, a context that the (readable) kubeconfig lacks. A file that cannot be read or
    parsed is `connect`'s to report; an unreachable server stays a cluster problem (exit 3)."""
    from volcano_pipelines.errors import InputError

    if kubeconfig and not os.path.exists(os.path.expanduser(kubeconfig)):
        raise InputError("kubeconfig", kubeconfig, "an existing kubeconfig file")
    known = known_contexts(kubeconfig) if context else []
    if known and context not in known:
        raise InputError("context", context, f"a context of the kubeconfig: {', '.join(known)}")


def context_namespace(kubeconfig: str | None, context: str | None) -> str | None:
    """The namespace of `context` (default: the current context) in the kubeconfig, or None."""
    contexts, current = read_contexts(kubeconfig)
    chosen = contexts.get(context or current or "")
    namespace = chosen.get("namespace") if isinstance(chosen, dict) else None
    return str(namespace) if namespace else None


def known_contexts(kubeconfig: str | None) -> list[str]:
    """The kubeconfig's context names; [] when it cannot be read (`connect` says why)."""
    import yaml

    try:
        return sorted(read_contexts(kubeconfig)[0])
    except (OSError, yaml.YAMLError, TypeError, AttributeError, ValueError):
        return []


def read_contexts(kubeconfig: str | None) -> tuple[dict[str, Any], str | None]:
    """Every context of the kubeconfig (name -> its `context` mapping) and the current one."""
    import yaml

    contexts: dict[str, Any] = {}
    current: str | None = None
    for path in (kubeconfig or os.environ.get("KUBECONFIG", "~/.kube/config")).split(os.pathsep):
        path = os.path.expanduser(path)
        if not path or not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
        if not isinstance(loaded, dict):
            continue
        for item in loaded.get("contexts") or []:
            if isinstance(item, dict) and str(item.get("name")) not in contexts:
                contexts[str(item.get("name"))] = item.get("context") or {}
        if "current-context" in loaded:
            current = loaded["current-context"]
    return contexts, current


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip() or None
    except OSError:
        return None
