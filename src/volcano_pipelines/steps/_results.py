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
    # Per task: pending, running, succeeded, failed and, once the job ended, stopped: pods that
    # were pending or running when it ended, which Volcano deleted (volcano.status.final_counts).
    tasks: dict[str, dict[str, int]] = field(default_factory=dict)
    failure: dict[str, Any] | None = None  # pod, task, exit_code, reason, message, log_tail
    message: str | None = None
    ps_linger_seconds: float | None = None  # how long parameter servers outlived the completion task
    missing: list[str] = field(default_factory=list)  # information not available (e.g. a refused permission)
    manifest: dict[str, Any] | None = None  # dry run: what would be created
    # What the training reported (docs/progress.md): the latest progress (step, total, loss,
    # examples_per_second, ...), the last checkpoint (step, time, path), and the step a
    # restarted run resumed from (None: it started fresh, or its code does not say).
    progress: dict[str, Any] | None = None
    last_checkpoint: dict[str, Any] | None = None
    resumed_from_step: int | None = None
    # Each restart of the job with its cause: number, pod, task, cause (evicted, preempted, node
    # lost, OOM killed, exit code N, deleted, unknown), exit_code, reason, message, at, text.
    restarts: list[dict[str, Any]] = field(default_factory=list)
    # The pods that are not as they should be at the last look, every one: what is wrong
    # (`failed: OOM killed`, `pending`, ...) -> task -> index ranges (`12-15,803`); the summary
    # on a screen (volcano/summary.py) shows a few ranges per line and counts the rest.
    abnormal: dict[str, dict[str, str]] = field(default_factory=dict)
    # Where the post-mortem record was saved: json, markdown, bytes, pods, seconds, notes (or error).
    post_mortem: dict[str, Any] | None = None
    # Hung tasks (docs/progress.md): the latest stall the step saw: tasks (`chief[0],worker[1]`),
    # silent (those whose process stopped beating), oldest_seconds, since, action (warn, fail,
    # restart) and cleared (when no task was stalled any more); None: none seen.
    stalled: dict[str, Any] | None = None

    @property
    def restart_causes(self) -> str:
        """The restarts in one short line (`1: evicted pod j-ps-0; 2: exit code 1 pod j-worker-1`)."""
        return "; ".join(f"{r.get('number')}: {r.get('cause')}" + (f" pod {r['pod']}" if r.get("pod") else "")
                         for r in self.restarts)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.manifest is None:
            del out["manifest"]
        # A scalar for the Argo outputs (one file per scalar field): the causes in one line.
        out["restart_causes"] = self.restart_causes
        if self.ps_linger_seconds is not None:  # measured to the microsecond; what users read is 10 ms
            out["ps_linger_seconds"] = round(self.ps_linger_seconds, 2)
        return out
