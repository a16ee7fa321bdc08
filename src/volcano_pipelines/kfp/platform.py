"""The step pods' Kubernetes settings, through kfp-kubernetes: the data PVC the sync step
writes into, pull secrets for the runtime image, node selector and tolerations. These shape
only the pod KFP starts for a step; the training pods the train step creates are shaped by
the step's own inputs (image_pull_secrets, node_selector, tolerations, data_pvc, ...).
The step pods' ServiceAccount is a run setting in KFP v2 (kfp-kubernetes has no helper for
it): `vpipe schedule kfp --service-account`, or the run's service account in the UI."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kfp import kubernetes

from volcano_pipelines.kube.validate import parse_toleration

__all__ = ["StepPod", "mount_data", "shape"]


@dataclass(frozen=True)
class StepPod:
    """Compile-time settings of every step pod of a pipeline."""

    image_pull_secrets: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[str, ...] = ()  # KEY[=VALUE]:EFFECT, as kubectl taint writes them


def shape(task: Any, pod: StepPod) -> Any:
    """Apply `pod` to one pipeline task (a step pod)."""
    if pod.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(pod.image_pull_secrets))
    for key, value in sorted(pod.node_selector.items()):
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for raw in pod.tolerations:
        toleration = parse_toleration(raw)
        kubernetes.add_toleration(task, key=toleration["key"], operator=toleration["operator"],
                                  value=toleration.get("value"), effect=toleration["effect"])
    return task


def mount_data(task: Any, pvc_name: Any, mount_path: str) -> Any:
    """Mount the data PVC (a pipeline parameter) into the step pod at `mount_path`."""
    return kubernetes.mount_pvc(task, pvc_name=pvc_name, mount_path=mount_path)
