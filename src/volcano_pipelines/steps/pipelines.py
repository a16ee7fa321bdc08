"""The end-to-end pipelines, described once for every front end: which train step, which
lifecycle steps follow it in which order, and the defaults a pipeline gives where the step's
own default does not fit a shared cluster. `kfp/pipelines.py` renders this to KFP IR and
`argo/pipelines.py` to a WorkflowTemplate; `tests/unit/test_pipeline_defaults.py` proves the
two renderings offer the same parameters with the same defaults.

    train-and-serve      sync -> train tf  -> reap -> tensorboard -> serve (serve_model)
    train-and-serve-mpi  sync -> train mpi -> tensorboard

MPI has no reap (Volcano ends an MPI job itself when its mpimaster completes) and no serve (an
MPI job runs an arbitrary command with no export contract)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from volcano_pipelines.backends.base import POST_MORTEM_VOLUME_DIR_ENV
from volcano_pipelines.steps._job_params import ALL_GROUPS, Run
from volcano_pipelines.steps.params import declared

__all__ = ["DEADLINE_SECONDS", "LOG_MOUNT", "LOG_MOUNT_STEPS", "PIPELINES", "POST_MORTEM_VOLUME_DIR",
           "POST_MORTEM_VOLUME_DIR_ENV", "SYNC_DEADLINE_SECONDS", "PipelineShape", "run_parameters", "shared_defaults"]


@dataclass(frozen=True)
class PipelineShape:
    kind: str  # tf | mpi
    name: str  # the pipeline's name in KFP; Argo's WorkflowTemplate is vpipe-<name>
    train: str  # the train step (registry name)
    after: tuple[str, ...]  # the lifecycle steps after training, in order (registry names)


def run_parameters() -> tuple[str, ...]:
    """The train step's parameters a pipeline run takes as they are (same name, type, default and
    help): those declared with `pipeline=True` (volcano/spec.py, steps/_job_params.py). The job's
    name, identity and volumes are wired by the pipeline instead."""
    return tuple(name for name, _, _, doc in declared(*ALL_GROUPS, Run) if doc.pipeline)


# What a pipeline run on a shared cluster needs, whatever the front end:
# - the queue manifests/cluster creates (capped; `default` would bypass the cap);
# - the data and log PVCs manifests/ creates;
# - a training timeout: a gang that never fits would keep the run, and (one run at a time) every
#   later scheduled run, waiting for ever; a day unless the run says otherwise;
# - TensorBoard behind a ClusterIP Service: NodePort would publish every run's logs,
#   unauthenticated, on every node's address (reach it through an Ingress or port-forward);
# - a bounded reap (Argo needs a finite deadline for it);
# - the copy pods of a sync over several pods in the same capped queue.
_SHARED: dict[str, dict[str, Any]] = {
    "train": {"queue": "vpipe", "data_pvc": "vpipe-data", "log_pvc": "vpipe-logs", "timeout": 86400},
    "reap": {"timeout": 600},
    "tensorboard": {"service_type": "ClusterIP"},
    "sync": {"queue": "vpipe"},  # the copy pods (sync --workers), in the capped queue as training is
}
# The sync step pod's deadline (activeDeadlineSeconds; the kubelet counts it from the pod's
# start, so a volume that never attaches or a NameNode that never answers ends too): past it
# the pod gets SIGTERM, the step stops what is in flight and fails, and the exit handler runs.
SYNC_DEADLINE_SECONDS = 6 * 3600
# The whole run's deadline (Argo's workflow activeDeadlineSeconds; KFP's SDK cannot set one,
# there each step is bounded instead): the training timeout plus sync's and the lifecycle steps'
# bounds, with room to spare. Past it the run fails and its exit handler still runs (a deadline
# is not a terminate), so the job is cleaned up.
DEADLINE_SECONDS = 2 * 86400

# The post-mortem record on the logs volume (issue 30): the step pods that save one (the train
# steps, and KFP's exit handler finish_run; Argo's exit handler saves none) mount the run's log
# PVC (the `log_pvc` input the training pods mount) at LOG_MOUNT, and the step writes a copy of
# the record under POST_MORTEM_VOLUME_DIR besides its usual place (the KFP artifact, Argo's output).
# Beside the run's logs: the training pods mount the PVC's root as their --log_dir (no subPath;
# the examples write checkpoints/, train/, export/ and metrics.json there), so the record lands at
# <log_pvc>/post-mortem/<namespace>/<job>.json and .md, the layout `vpipe status --post-mortem`
# reads (VPIPE_POST_MORTEM_DIR=<mount>/post-mortem) and the local backend's <log_dir>/post-mortem/.
# `tensorboard_logdir` is only what TensorBoard reads, not where training writes: not used here.
# A mount path of its own, not /logs, so it can never shadow a path the step image uses.
LOG_MOUNT = "/vpipe/logs"
POST_MORTEM_VOLUME_DIR = f"{LOG_MOUNT}/post-mortem"
LOG_MOUNT_STEPS = frozenset({"train_tf", "train_mpi", "finish_run"})

PIPELINES: dict[str, PipelineShape] = {
    "tf": PipelineShape("tf", "train-and-serve", "train_tf", ("reap", "tensorboard", "serve")),
    "mpi": PipelineShape("mpi", "train-and-serve-mpi", "train_mpi", ("tensorboard",)),
}


def shared_defaults(step: str) -> dict[str, Any]:
    """The pipelines' defaults for `step`'s parameters ("train", or a registry name: train_tf
    and train_mpi are "train"), where they differ from the step's own."""
    role = "train" if step in ("train", "train_tf", "train_mpi") else step
    return dict(_SHARED.get(role, {}))

