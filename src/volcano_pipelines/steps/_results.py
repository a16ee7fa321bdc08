"""The result of the train step (and `vpipe status`): what every front end prints, returns or
turns into pipeline outputs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from volcano_pipelines.steps.registry import WHOLE, Output

__all__ = ["TrainResult"]


@dataclass
class TrainResult:
    # The KFP component's output parameters (steps/registry.py).
    OUTPUTS: ClassVar[tuple[Output, ...]] = (
        Output("job_name", "name of the Volcano Job", "name"),
        Output("job_namespace", "namespace of the Volcano Job", "namespace"),
        Output("run_id", "run identity the job is labelled with", missing=""),
        Output("phase", "final phase of the job (Completed; DryRun; Pending etc. without wait)"),
        Output("succeeded", "the job completed"),
        Output("duration_seconds", "from creation to the final phase (0 when the job has not finished)", missing=0.0),
        Output("retries", "job restarts"),
        Output("result", "the whole step result (TrainResult.to_dict())", WHOLE),
    )

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
