"""The exit handler's work: say how a pipeline run ended and what its training job did, and
when the run did not succeed, clean the job up (a step pod that died without SIGTERM leaves
its job running; a failed job keeps its name taken until its ttl). A step like the others
(flat, typed, one docstring): the KFP exit handler calls it, and so can an Argo onExit."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from volcano_pipelines.backends.base import OnCancel
from volcano_pipelines.errors import InputError
from volcano_pipelines.labels import TRAIN_STEP
from volcano_pipelines.steps.registry import WHOLE, Output
from volcano_pipelines.steps.params import check_types
from volcano_pipelines.steps._results import TrainResult

__all__ = ["SUCCEEDED", "RunReport", "finish_run"]

SUCCEEDED = "SUCCEEDED"  # PipelineTaskFinalStatus.state of a run whose tasks all succeeded


@dataclass
class RunReport:
    # The KFP component's output parameters (steps/registry.py).
    OUTPUTS: ClassVar[tuple[Output, ...]] = (
        Output("pipeline_state", "how the pipeline's tasks ended (SUCCEEDED, FAILED, CANCELED, ...)"),
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

    @property
    def job_phase(self) -> str:
        return str(self.job["phase"]) if self.job else "NotFound"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    """Report how a pipeline run ended and what its training job did; when the run did not
    succeed, clean up the run's training job per on_failure.

    Args:
        run_id: run identity of the pipeline run (the training job carries it as a label)
        pipeline_state: how the run's tasks ended: SUCCEEDED, FAILED, CANCELED, ...
        error_message: why the run failed, when it did
        namespace: namespace of the run's training job (default: the context's namespace, else default)
        kubeconfig: kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)
        context: kubeconfig context
        on_failure: what happens to the run's training job when the run did not succeed: delete, abort or keep
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
    report = RunReport(run_id=run_id, pipeline_state=pipeline_state, error_message=error_message or None,
                       namespace=namespace, job=None, cleanup="none")
    if job is None:
        return report
    name = job["metadata"]["name"]
    result: TrainResult = status(name, namespace=namespace, kubeconfig=kubeconfig, context=context, log_lines=log_lines)
    report.job = result.to_dict()
    if pipeline_state == SUCCEEDED:
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
