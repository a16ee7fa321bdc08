"""Containers and pod specs: the pieces every workload of ours shares, Volcano Job or
Deployment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ISTIO_INJECT", "RESTRICTED_CONTAINER", "RESTRICTED_POD", "container", "env_list", "literal", "mesh_opt_out",
           "pod_spec", "resources"]

GPU_RESOURCE = "nvidia.com/gpu"
# Istio's per-pod switch: a label (Istio >= 1.10's preferred form) and the older annotation,
# both honoured by the injection webhook.
ISTIO_INJECT = "sidecar.istio.io/inject"


# What the Pod Security Standards' restricted level asks of a pod and of each container (the
# image must then run as a numeric non-root user).
RESTRICTED_POD: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def mesh_opt_out(sidecar: bool) -> dict[str, str]:
    """What a pod carries, as label and as annotation, to stay out of a service mesh: in a
    namespace labelled istio-injection=enabled (a multi-user KFP profile) the sidecar keeps a
    finished task's pod running (its job never completes), can break init-container downloads,
    and puts the pod behind the profile's mTLS policy. Empty when the sidecar is wanted (the
    namespace decides)."""
    return {} if sidecar else {ISTIO_INJECT: "false"}


def resources(cpu: str | None, memory: str | None, gpus: int = 0) -> dict[str, dict[str, str]]:
    """CPU is requested, not limited (a CPU limit throttles training and serving); memory and
    GPUs are limited to the request so the scheduler's view matches what the pod may use."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
        limits["memory"] = memory
    if gpus:
        requests[GPU_RESOURCE] = str(gpus)
        limits[GPU_RESOURCE] = str(gpus)
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def literal(text: str) -> str:
    """Kubernetes expands `$(VAR)` in a container's command, args and env values, and turns
    `$$` into `$`: doubling every `$` makes the text reach the process exactly as written
    (a user argument `--name=$(id)` stays that, and so does the entry script's bash)."""
    return text.replace("$", "$$")


def env_list(values: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def container(
    *,
    name: str,
    image: str,
    command: Sequence[str] = (),
    args: Sequence[str] = (),
    env: Sequence[Mapping[str, Any]] = (),
    resources: Mapping[str, Any] | None = None,
    mounts: Sequence[Mapping[str, Any]] = (),
    ports: Sequence[Mapping[str, Any]] = (),
    pull_always: bool = False,
    readiness_probe: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": image}
    if command:
        out["command"] = [literal(part) for part in command]
    if args or command:
        out["args"] = [literal(arg) for arg in args]
    out["env"] = [{**e, "value": literal(e["value"])} if "value" in e else dict(e) for e in env]
    out["resources"] = dict(resources or {})
    out["volumeMounts"] = [dict(m) for m in mounts]
    if ports:
        out["ports"] = [dict(p) for p in ports]
    if readiness_probe:
        out["readinessProbe"] = dict(readiness_probe)
    if pull_always:
        # A private image cached on a node must not run for someone without the credentials.
        out["imagePullPolicy"] = "Always"
    return out


def pod_spec(
    containers: Sequence[Mapping[str, Any]],
    *,
    volumes: Sequence[Mapping[str, Any]] = (),
    restart_policy: str | None = None,
    image_pull_secrets: Sequence[str] = (),
    service_account: str | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    priority_class: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    spec["containers"] = [dict(c) for c in containers]
    spec["volumes"] = [dict(v) for v in volumes]
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    if service_account:
        spec["serviceAccountName"] = service_account
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def mounted_claim(pod: Mapping[str, Any], path: str) -> tuple[str, str, str] | None:
    """The PersistentVolumeClaim a pod sees at `path` (absolute, normalized), the directory
    inside the claim that `path` is, and the image of the container that mounts it: (claim,
    subpath, image), or None when no claim is mounted above it. The deepest mount wins (a claim
    mounted inside another's mount point)."""
    spec = pod.get("spec") or {}
    claims = {v.get("name"): (v.get("persistentVolumeClaim") or {}).get("claimName") for v in spec.get("volumes") or []}
    best: tuple[int, str, str, str] | None = None
    for each in spec.get("containers") or []:
        for mount in each.get("volumeMounts") or []:
            point = str(mount.get("mountPath", "")).rstrip("/") or "/"
            claim = claims.get(mount.get("name"))
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if not claim or not inside or (best is not None and len(point) <= best[0]):
                continue
            below = path[len(point):].strip("/")
            sub = "/".join(p for p in (str(mount.get("subPath") or "").strip("/"), below) if p)
            best = (len(point), claim, sub, str(each.get("image", "")))
    return None if best is None else (best[1], best[2], best[3])


_CONFIG_SOURCES = ("secret", "configMap", "projected")


def mounted_config(pod: Mapping[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The Secret, ConfigMap or projected volume a pod's container mounts at or above `path`
    (absolute, normalized) and its mount: (volume, mount), read-only, for another pod to mount
    the same at the same place; None when `path` is on no such volume."""
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if any(k in v for k in _CONFIG_SOURCES)}
    for each in spec.get("containers") or []:
        for mount in each.get("volumeMounts") or []:
            point = str(mount.get("mountPath", "")).rstrip("/") or "/"
            if mount.get("name") in volumes and (path == point or path.startswith(point.rstrip("/") + "/")):
                kept = {k: mount[k] for k in ("name", "mountPath", "subPath") if k in mount}
                return dict(volumes[mount["name"]]), {**kept, "readOnly": True}
    return None
