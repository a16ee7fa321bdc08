"""Identity labels every object this package creates carries (docs/design.md, "Identity"): the
builders put them on, the client finds a run's objects by them."""

from __future__ import annotations

import os

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
    "RUN_ID_ENV",
    "identity_labels",
    "run_id_or_new",
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
# The run id a pipeline gives every step of one run (the Argo templates and KFP components set it).
RUN_ID_ENV = "VPIPE_RUN_ID"


def identity_labels(step: str, run_id: str | None) -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, STEP_LABEL: step}
    if run_id:
        labels[RUN_LABEL] = run_id
    return labels


def run_selector(run_id: str, step: str) -> str:
    """The label selector of the objects one run's step created."""
    return f"{RUN_LABEL}={run_id},{STEP_LABEL}={step}"


def run_id_or_new(given: str | None) -> str:
    """The run id of a step: the one given, else the pipeline's (RUN_ID_ENV), else a new one of
    16 hex digits (random bytes, not the uuid module: every `vpipe` command would import it)."""
    return given or os.environ.get(RUN_ID_ENV) or os.urandom(8).hex()
