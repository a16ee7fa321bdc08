"""Identity labels every object this package creates carries (docs/design.md, "Identity"): the
builders put them on, the client finds a run's objects by them."""

from __future__ import annotations

__all__ = [
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "POD_NAME_ENV",
    "RUN_LABEL",
    "STEP_LABEL",
    "TRAIN_STEP",
    "VOLCANO_JOB_NAME_LABEL",
    "VOLCANO_TASK_LABEL",
    "EXPIRES_ANNOTATION",
    "identity_labels",
    "run_selector",
]

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "volcano-pipelines"
RUN_LABEL = "volcano-pipelines/run"
STEP_LABEL = "volcano-pipelines/step"
TRAIN_STEP = "train"  # the step label of training jobs (TF and MPI)
# When an object made for a job (a TensorBoard) may be deleted; the reap sweeper enforces it.
EXPIRES_ANNOTATION = "volcano-pipelines/expires-at"
# Volcano's own labels on the pods it creates: the job and the task (spec) a pod belongs to.
VOLCANO_JOB_NAME_LABEL = "volcano.sh/job-name"
VOLCANO_TASK_LABEL = "volcano.sh/task-spec"
# The name of the pod a step runs in (the downward API's metadata.name, set by the Argo
# templates): a step told SIGTERM while its own pod is being deleted knows the pod was lost.
POD_NAME_ENV = "VPIPE_POD_NAME"


def identity_labels(step: str, run_id: str | None) -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, STEP_LABEL: step}
    if run_id:
        labels[RUN_LABEL] = run_id
    return labels


def run_selector(run_id: str, step: str) -> str:
    """The label selector of the objects one run's step created."""
    return f"{RUN_LABEL}={run_id},{STEP_LABEL}={step}"
