"""Stand-ins for the KFP output artifacts the step runtime writes to (kfp.dsl.Metrics, Markdown)
and the outputs of a component by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from volcano_pipelines.kfp.specs import COMPONENTS


class Metrics:
    """Stands in for kfp.dsl.Metrics: the only calls the runtime makes."""

    def __init__(self) -> None:
        self.metadata: dict[str, float] = {}

    def log_metric(self, name: str, value: float) -> None:
        self.metadata[name] = value


class Markdown:
    def __init__(self, path: Path) -> None:
        self.path = str(path)


def _outputs(step: str, values: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip([name for name, _, _ in COMPONENTS[step].outputs], values, strict=True))
