"""The exit handler's work: say how a pipeline run ended and what its training job did, and
when the run did not succeed, clean the job up (a step pod that died without SIGTERM leaves
its job running; a failed job keeps its name taken until its ttl). A step like the others
(flat, typed, one docstring): the KFP exit handler calls it, and so can an Argo onExit."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from volcano_pipelines.backends.base import OnCancel
from volcano_pipelines.errors import InputError
from volcano_pipelines.labels import TRAIN_STEP
from volcano_pipelines.steps.registry import WHOLE, Output
from volcano_pipelines.steps.params import check_types
from volcano_pipelines.steps._results import TrainResult

log = logging.getLogger("volcano_pipelines.finish")

__all__ = ["FAILED_STATES", "SUCCEEDED", "SUCCEEDED_STATES", "RunReport", "finish_run", "run_outcome"]

SUCCEEDED = "SUCCEEDED"  # kfp.local's PipelineTaskFinalStatus.state of a run whose tasks all succeeded
# The exit handler is handed a state in one of several vocabularies. KFP's backend passes the
# ML Metadata execution state of the exit handler's group: COMPLETE (or CACHED) after a
# successful run, FAILED, CANCELED (KFP's sample pipeline_with_input_status_state.py asserts
# COMPLETE); kfp.local passes SUCCEEDED / FAILED; PipelineTaskFinalStatus's docstring names
# CANCELLED; an Argo onExit passes {{workflow.status}}: Succeeded, Failed, Error. Compared
# case-insensitively. Anything else is not understood: the job is kept, never deleted on a guess.
SUCCEEDED_STATES = frozenset({"SUCCEEDED", "COMPLETE", "CACHED"})
FAILED_STATES = frozenset({"FAILED", "FAILURE", "CANCELED", "CANCELLED", "ERROR"})


@dataclass
class RunReport:
    # The KFP component's output parameters (steps/registry.py).
    OUTPUTS: ClassVar[tuple[Output, ...]] = (
        Output("pipeline_state",
               "how the pipeline's tasks ended (COMPLETE, CACHED, FAILED, CANCELED; SUCCEEDED under kfp.local)"),
        Output("job_phase", "phase of the run's training job (NotFound when it has none)"),
        Output("cleanup", "what was done to the job: deleted, aborted, kept or none"),
        Output("result", "the whole report", WHOLE),
    )

    run_id: str
    pipeline_state: str
    error_message: str | None
    namespace: str
    job: dict[str, Any] | None  # TrainResult.to_dict() of the run's training job, None when it has none
    cleanup: str  # deleted | aborted | kept | none
    outcome: str = "succeeded"  # succeeded | failed | unknown (run_outcome of pipeline_state)

    @property
    def job_phase(self) -> str:
        return str(self.job["phase"]) if self.job else "NotFound"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_outcome(pipeline_state: str) -> str:
    """succeeded, failed or unknown: how the run ended, from the state the exit handler got."""
    state = (pipeline_state or "").strip().upper()
    if state in SUCCEEDED_STATES:
        return "succeeded"
    if state in FAILED_STATES:
        return "failed"
    return "unknown"


def finish_run(
    run_id: str,
    *,
    pipeline_state: str = SUCCEEDED,
    error_message: str | None = None,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    on_failure: OnCancel = "delete",
    log_lines: int = 20,
) -> RunReport:
    """Report how a pipeline run ended and what its training job did; when the run failed or
    was cancelled, clean up the run's training job per on_failure (a state it does not know
    keeps the job).

    Args:
        run_id: run identity of the pipeline run (the training job carries it as a label)
        pipeline_state: how the run's tasks ended: COMPLETE, CACHED or SUCCEEDED; FAILED or CANCELED
        error_message: why the run failed, when it did
        namespace: namespace of the run's training job (default: the context's namespace, else default)
        kubeconfig: kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)
        context: kubeconfig context
        on_failure: what happens to the run's training job when the run failed or was cancelled: delete, abort or keep
        log_lines: last log lines of a failed pod to report
    """
    check_types(finish_run, locals())
    from volcano_pipelines.k8s import volcano as k8s_volcano
    from volcano_pipelines.k8s.client import connect
    from volcano_pipelines.steps._train import status
    from volcano_pipelines.backends.base import ON_CANCEL_CHOICES
    from volcano_pipelines.volcano.status import FINAL_PHASES

    if not run_id:
        raise InputError("run_id", run_id, "the run's identity (the KFP run id)")
    if on_failure not in ON_CANCEL_CHOICES:
        raise InputError("on_failure", on_failure, f"one of {', '.join(ON_CANCEL_CHOICES)}")
    cluster = connect(kubeconfig, context)
    namespace = namespace or cluster.namespace
    job = k8s_volcano.find_run_job(cluster, namespace, run_id, TRAIN_STEP)
    outcome = run_outcome(pipeline_state)
    report = RunReport(run_id=run_id, pipeline_state=pipeline_state, error_message=error_message or None,
                       namespace=namespace, job=None, cleanup="none", outcome=outcome)
    if job is None:
        return report
    name = job["metadata"]["name"]
    result: TrainResult = status(name, namespace=namespace, kubeconfig=kubeconfig, context=context, log_lines=log_lines)
    report.job = result.to_dict()
    if outcome == "succeeded":
        return report
    if outcome == "unknown":
        log.warning("run %s ended in state %r, which is neither a success (%s) nor a failure (%s): "
                    "keeping job %s/%s", run_id, pipeline_state, ", ".join(sorted(SUCCEEDED_STATES)),
                    ", ".join(sorted(FAILED_STATES)), namespace, name)
        report.cleanup = "kept"
        return report
    if on_failure == "keep":
        report.cleanup = "kept"
    elif on_failure == "delete":
        k8s_volcano.delete_job(cluster, namespace, name)
        report.cleanup = "deleted"
    elif result.phase not in FINAL_PHASES:
        report.cleanup = k8s_volcano.abort_job(cluster, job, "PipelineFailed")
    else:
        report.cleanup = "kept"  # already over: nothing left to abort
    return report
