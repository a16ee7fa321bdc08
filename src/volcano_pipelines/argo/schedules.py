"""Scheduled retraining with Argo: the nightly CronWorkflow that runs the train-and-serve
pipeline (argo/pipelines.py). Thin: its arguments are the pipeline's parameters."""

from __future__ import annotations

from hera.workflows import CronWorkflow, Parameter
from hera.workflows.models import WorkflowTemplateRef

from volcano_pipelines.argo.pipelines import PIPELINES
from volcano_pipelines.argo.templates import PART_OF

__all__ = ["NIGHTLY_ARGUMENTS", "NIGHTLY_DEADLINE_SECONDS", "nightly_retrain"]

NIGHTLY_ARGUMENTS = {
    # An example: edit (or patch with kustomize) before applying.
    "name": "mnist",
    "sync-src": "hdfs://namenode:8020/datasets/mnist",
    "code-url": "http://files.example/mnist/",
    "workers": "2",
    "timeout": "21600",
}
# Each night's run ends within 20 hours, whatever hangs (a volume that never attaches, a gang
# that never fits): with concurrencyPolicy Forbid a run still going at the next 02:00 would
# silently skip that night, and every night after it if it never ended. Past the deadline the
# run fails and its exit handler still runs and cleans up (a deadline is not a terminate).
NIGHTLY_DEADLINE_SECONDS = 20 * 3600


def nightly_retrain() -> CronWorkflow:
    """train-and-serve every night at 02:00 UTC; never two at once; a run missed by more than
    an hour (controller down) is skipped, not started late into the working day; each run ends
    within NIGHTLY_DEADLINE_SECONDS."""
    return CronWorkflow(
        name="vpipe-nightly-retrain",
        labels=PART_OF,
        schedules=["0 2 * * *"],
        timezone="Etc/UTC",
        concurrency_policy="Forbid",
        starting_deadline_seconds=3600,
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=3,
        active_deadline_seconds=NIGHTLY_DEADLINE_SECONDS,
        workflow_template_ref=WorkflowTemplateRef(name=PIPELINES["tf"].name),
        arguments=[Parameter(name=k, value=v) for k, v in NIGHTLY_ARGUMENTS.items()],
    )
