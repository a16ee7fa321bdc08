"""The result of the train step (and `vpipe status`): what every front end prints, returns or
turns into pipeline outputs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["TrainResult"]


@dataclass
class TrainResult:
    name: str
    namespace: str
    run_id: str | None
    phase: str
    succeeded: bool
    created: bool = False
    backend: str = "cluster"
    duration_seconds: float | None = None
    retries: int = 0
    tasks: dict[str, dict[str, int]] = field(default_factory=dict)
    failure: dict[str, Any] | None = None  # pod, task, exit_code, reason, message, log_tail
    message: str | None = None
    ps_linger_seconds: float | None = None  # how long parameter servers outlived the completion task
    missing: list[str] = field(default_factory=list)  # information not available (e.g. a refused permission)
    manifest: dict[str, Any] | None = None  # dry run: what would be created

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.manifest is None:
            del out["manifest"]
        return out
