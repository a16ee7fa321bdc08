"""Deployments, Services, Ingresses and ConfigMaps, each with the package's identity labels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from volcano_pipelines.labels import identity_labels

__all__ = ["config_map", "deployment", "ingress", "metadata", "owner_reference", "service"]


def metadata(name: str, namespace: str, *, step: str, run_id: str | None, labels: Mapping[str, str] | None = None,
             annotations: Mapping[str, str] | None = None,
             owners: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "labels": {**(labels or {}), **identity_labels(step, run_id)}}
    if annotations:
        meta["annotations"] = dict(annotations)
    if owners:
        meta["ownerReferences"] = [dict(o) for o in owners]
    return meta


def owner_reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Ties an object's lifetime to `obj` (garbage-collected with it)."""
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": False}


def deployment(meta: Mapping[str, Any], pod: Mapping[str, Any], *, selector: Mapping[str, str], replicas: int = 1,
               max_unavailable: int | str = 0, max_surge: int | str = 1,
               pod_labels: Mapping[str, str] | None = None,
               pod_annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Deployment whose rollout never takes the last ready pod away (maxUnavailable 0 by
    default): a failed new version leaves the old one serving."""
    template_meta: dict[str, Any] = {"labels": {**(pod_labels or {}), **selector}}
    if pod_annotations:
        template_meta["annotations"] = dict(pod_annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": dict(meta),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(selector)},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxUnavailable": max_unavailable, "maxSurge": max_surge}},
            "template": {"metadata": template_meta, "spec": dict(pod)},
        },
    }


def service(meta: Mapping[str, Any], *, selector: Mapping[str, str], ports: Sequence[Mapping[str, Any]],
            service_type: str = "ClusterIP") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": dict(meta),
        "spec": {"type": service_type, "selector": dict(selector), "ports": [dict(p) for p in ports]},
    }


def ingress(meta: Mapping[str, Any], *, service_name: str, port: int, path: str, host: str | None = None,
            ingress_class: str | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"http": {"paths": [{
        "path": path, "pathType": "Prefix",
        "backend": {"service": {"name": service_name, "port": {"number": port}}},
    }]}}
    if host:
        rule["host"] = host
    spec: dict[str, Any] = {"rules": [rule]}
    if ingress_class:
        spec["ingressClassName"] = ingress_class
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": dict(meta), "spec": spec}


def config_map(meta: Mapping[str, Any], data: Mapping[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict(meta), "data": dict(data)}
