"""What the two steps that run a long-lived service over a PVC (tensorboard, serve) check
alike: the arguments they share, before anything is created, and the PVC they mount."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from volcano_pipelines.errors import InputError
from volcano_pipelines.objects.validate import (
    check_dns_label,
    check_dns_subdomain,
    check_image,
    check_positive_seconds,
    check_quantity,
)

__all__ = ["check_common", "require_pvc"]


def check_common(*, name: str, namespace: str | None, pvc_field: str, pvc: str, image: str | None, cpu: str | None,
                 memory: str | None, image_pull_secrets: Sequence[str] | None, timeout: float | None) -> None:
    """Checks the tensorboard and serve steps share."""
    # A Service name must be a DNS-1035 label (start with a letter).
    check_dns_label("name", name, must_start_with_letter=True)
    if namespace is not None:
        check_dns_label("namespace", namespace)
    check_dns_subdomain(pvc_field, pvc)
    check_image("image", image)
    check_quantity("cpu", cpu)
    check_quantity("memory", memory)
    for secret in image_pull_secrets or ():
        check_dns_subdomain("image_pull_secrets", secret)
    if timeout is not None:
        check_positive_seconds("timeout", timeout)


def require_pvc(cluster: Any, namespace: str, field_name: str, name: str) -> None:
    """A PVC that does not exist would leave the pod Pending forever: refuse it up front."""
    from volcano_pipelines.k8s import apps

    if apps.get(cluster, "v1", "PersistentVolumeClaim", namespace, name) is None:
        raise InputError(field_name, name, f"an existing PersistentVolumeClaim in namespace {namespace}")
