"""The parameters the two service steps (serve, tensorboard) share: two groups, where their pods
may run (Placement) and what their objects carry (ObjectLabels), and the pods' pull secrets
(ImagePullSecrets). Each help is written here once, with the wording of a step whose objects
it describes differently (`serve=...`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from volcano_pipelines.declaration import Doc, arg
from volcano_pipelines.objects.validate import check_label_value, check_user_labels, checked_placement

__all__ = ["ImagePullSecrets", "ObjectLabels", "Placement"]

# One parameter, not a group: it stands apart from the groups in both steps' signatures (and so
# in their flags' order). Its help is the hint's (interface/params.py reads an Annotated Doc).
ImagePullSecrets = Annotated[Sequence[str] | None, Doc("pull secrets of the pod", by_kind=(
    ("serve", "pull secrets of the pods"),))]


@dataclass(frozen=True)
class Placement:
    """The nodes a step's pods may be scheduled on (`placement: Placement = Placement()`); the
    front ends show its fields as flat inputs (--node-selector, --toleration)."""

    node_selector: Mapping[str, str] | None = arg(
        None, "node labels the pod must match (e.g. a pool for services)",
        serve="node labels the serving pods must match (e.g. a pool for serving)")
    tolerations: Sequence[str] | None = arg(
        None, "taints the pod tolerates, kubectl form KEY[=VALUE]:EFFECT",
        serve="taints the serving pods tolerate, kubectl form KEY[=VALUE]:EFFECT")

    def checked(self) -> tuple[dict[str, str], tuple[dict[str, Any], ...]]:
        """The node selector and the parsed tolerations (InputError naming the field)."""
        return checked_placement(self.node_selector, self.tolerations)


@dataclass(frozen=True)
class ObjectLabels:
    """The labels a step's objects carry (`object_labels: ObjectLabels = ObjectLabels()`): the
    run's identity, the caller's own, and the one that keeps a service mesh's sidecar out of the
    pods; the front ends show its fields as flat inputs (--run-id, --label, --istio-sidecar)."""

    run_id: str | None = arg(None, "run identity label")
    labels: Mapping[str, str] | None = arg(None, "labels on every object")
    istio_sidecar: bool = arg(
        False, "let a service mesh inject its sidecar into the pod (default: it carries sidecar.istio.io/inject=false)",
        serve="let a service mesh inject its sidecar into the serving pods (default: they carry "
              "sidecar.istio.io/inject=false; KServe's InferenceService is left to KServe)")

    def checked(self) -> tuple[str | None, dict[str, str], bool]:
        """(run_id, labels, istio_sidecar), checked: labels valid and none of the identity labels
        this package sets; run_id a label value (an InputError names the field)."""
        check_user_labels("labels", self.labels or {})
        if self.run_id is not None:
            check_label_value("run_id", self.run_id)
        return self.run_id, dict(self.labels or {}), self.istio_sidecar
