"""Reading a Deployment's rollout (pure): done, still going, or failed, and why. The rules
are kubectl's `rollout status`, plus a look at the new pods so that a crashing container or
an image that cannot be pulled fails the wait at once instead of at the progress deadline."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BAD_WAITING_REASONS", "TEMPLATE_HASH_ANNOTATION", "Rollout", "new_pod_problem", "rollout_status", "stamp_template", "template_hash"]

Obj = Mapping[str, Any]

# Container states that do not heal by waiting.
BAD_WAITING_REASONS = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
    "CreateContainerError", "RunContainerError",
})


@dataclass(frozen=True)
class Rollout:
    done: bool
    failed: bool
    message: str


def rollout_status(deployment: Obj) -> Rollout:
    meta = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    name = meta.get("name", "?")
    if int(meta.get("generation") or 0) > int(status.get("observedGeneration") or 0):
        return Rollout(False, False, f"deployment {name}: waiting for the controller to see the new spec")
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Progressing" and condition.get("reason") == "ProgressDeadlineExceeded":
            return Rollout(False, True, f"deployment {name} exceeded its progress deadline: {condition.get('message') or ''}".rstrip(": "))
    wanted = int(spec.get("replicas", 1) or 0)
    updated = int(status.get("updatedReplicas") or 0)
    total = int(status.get("replicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    if updated < wanted:
        return Rollout(False, False, f"deployment {name}: {updated} of {wanted} new replicas updated")
    if total > updated:
        return Rollout(False, False, f"deployment {name}: {total - updated} old replica(s) pending termination")
    if available < updated:
        return Rollout(False, False, f"deployment {name}: {available} of {updated} updated replicas available")
    return Rollout(True, False, f"deployment {name}: {available} replica(s) available")


def new_pod_problem(pods: Iterable[Obj], template_hash: str, hash_annotation: str) -> str | None:
    """Why a pod of the new template cannot become ready, if one says so: phase Failed, or a
    container waiting for a reason that does not heal by waiting."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (meta.get("annotations") or {}).get(hash_annotation) != template_hash or meta.get("deletionTimestamp"):
            continue
        status = pod.get("status") or {}
        name = meta.get("name", "?")
        if status.get("phase") == "Failed":
            detail = _terminated(status) or status.get("reason") or "Failed"
            return f"pod {name} failed: {detail}"
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in BAD_WAITING_REASONS:
                text = f"pod {name}: container {cs.get('name')} {waiting['reason']}"
                return f"{text}: {waiting['message']}" if waiting.get("message") else text
    return None


def _terminated(status: Obj) -> str | None:
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            text = f"container {cs.get('name')} exited with code {term.get('exitCode')}"
            if term.get("reason"):
                text += f" ({term['reason']})"
            return text
    return None


TEMPLATE_HASH_ANNOTATION = "volcano-pipelines/template-hash"


def template_hash(deployment: Obj) -> str:
    """A short digest of the pod template as we build it (before the API server adds
    defaults): the new pods of a rollout are the ones carrying it."""
    import hashlib
    import json

    template = dict((deployment.get("spec") or {}).get("template") or {})
    meta = dict(template.get("metadata") or {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != TEMPLATE_HASH_ANNOTATION}
    meta["annotations"] = annotations
    template["metadata"] = meta
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def stamp_template(deployment: dict[str, Any]) -> dict[str, Any]:
    """The Deployment with its template hash as a pod annotation (returns a new dict)."""
    digest = template_hash(deployment)
    spec = dict(deployment["spec"])
    template = dict(spec["template"])
    meta = dict(template.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), TEMPLATE_HASH_ANNOTATION: digest}
    template["metadata"] = meta
    spec["template"] = template
    return {**deployment, "spec": spec}
