"""Where a service step's pods may run (serve, tensorboard): one parameter group. Its help is
written here, with the wording of each step whose pods it describes differently."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.declaration import arg
from volcano_pipelines.objects.validate import checked_placement

__all__ = ["Placement"]


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
