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

from volcano_pipelines.postmortem import POST_MORTEM_VOLUME_DIR_ENV
from volcano_pipelines.steps._job_params import ALL_GROUPS, Run
from volcano_pipelines.interface.params import declared

__all__ = ["DATA_MOUNT", "DEADLINE_SECONDS", "JOB", "JOB_NAMESPACE", "LOG_MOUNT", "LOG_MOUNT_STEPS", "PIPELINES",
           "POST_MORTEM_VOLUME_DIR", "POST_MORTEM_VOLUME_DIR_ENV", "SERVE_SWITCH", "SERVING_SUFFIX",
           "SYNC_DEADLINE_SECONDS", "TENSORBOARD_SUFFIX", "LEFT_OUT", "WIRING", "PipelineShape", "RunInput",
           "StepWiring", "Wire", "role", "run_inputs", "run_parameters", "shared_defaults", "spelled", "wiring"]


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



# --- the wiring: what each step of a pipeline gets, for both front ends ----------------------
#
# Each front end renders this: KFP (kfp/pipelines.py) offers the run inputs below as the run
# form's parameters; Argo (argo/pipelines.py) offers every step parameter that is neither wired
# nor left out, named <prefix><parameter> (dashed), so a run input is the Argo parameter of the
# step parameter it feeds first (`spelled`). tests/unit/test_pipeline_defaults.py reads the
# shipped files of both against this.

# Where the sync step pod mounts the data PVC. Each dataset is staged into a directory of its
# own, named after the model (<data_pvc>/<model_name>/), which is all the training pods mount:
# two models on one PVC never see, overwrite or (sync_delete) remove each other's files.
DATA_MOUNT = "/data"
# What a pipeline names the objects the lifecycle steps create: the model name plus a suffix
# (the training job is named like the model; Volcano gives it a Service of that name too).
TENSORBOARD_SUFFIX = "-tensorboard"
SERVING_SUFFIX = "-serving"
# A wired value read from what the train step reports about the job it created (KFP: train's
# outputs job_name / job_namespace; Argo: its `name` output, and the workflow's namespace, which
# is where the Argo train templates run the job).
JOB = "train:job"
JOB_NAMESPACE = "train:namespace"


@dataclass(frozen=True)
class Wire:
    """A step argument the pipeline sets itself instead of offering it as a run parameter."""

    param: str  # the step's parameter (sync's `data_pvc`: the PVC its pod mounts at DATA_MOUNT)
    source: str  # a run input's name (model_name, data_pvc, log_pvc) or JOB / JOB_NAMESPACE
    suffix: str = ""  # appended to the value: an object named after the model
    under_data_mount: bool = False  # the value is a directory under DATA_MOUNT (the front end's mount)


@dataclass(frozen=True)
class StepWiring:
    """One step of a pipeline: the arguments it is wired, those left at the step's default, and
    the prefix its own run parameters carry (the train step's carry none)."""

    step: str  # "sync", "train" (the pipeline's train step, TF or MPI) or a lifecycle step
    prefix: str  # KFP: sync_delete; Argo: sync-delete
    wired: tuple[Wire, ...] = ()  # in the order Argo lists a task's arguments
    left_out: frozenset[str] = frozenset()


# Left at their default in every step: a dry run of one step (the next would fail), a train step
# or TensorBoard that does not wait (the next step would act on a job still running, or a URL
# not yet serving).
LEFT_OUT = frozenset({"dry_run", "wait"})
WIRING: dict[str, StepWiring] = {
    # sync writes the dataset into its own directory of the data PVC, which it mounts.
    "sync": StepWiring("sync", "sync_", (Wire("dst", "model_name", under_data_mount=True), Wire("data_pvc", "data_pvc"))),
    "train": StepWiring("train", "", (Wire("data_subpath", "model_name"),)),
    # The lifecycle steps act on the job train created, in its namespace. Left out: what makes
    # reap a sweep (the pipeline reaps one job), and serve's local model directory (the serve pod
    # does not mount the PVC) and its cleanup of old versions.
    "reap": StepWiring("reap", "reap_", (Wire("job", JOB), Wire("namespace", JOB_NAMESPACE)),
                       frozenset({"selector", "all_namespaces", "group_label", "delete_deployment", "delete_namespace",
                                  "once"})),
    "tensorboard": StepWiring("tensorboard", "tensorboard_",
                              (Wire("name", "model_name", TENSORBOARD_SUFFIX), Wire("log_pvc", "log_pvc"),
                               Wire("namespace", JOB_NAMESPACE), Wire("job", JOB))),
    "serve": StepWiring("serve", "serving_",
                        (Wire("name", "model_name", SERVING_SUFFIX), Wire("model_name", "model_name"),
                         Wire("pvc", "log_pvc"), Wire("namespace", JOB_NAMESPACE)),
                        frozenset({"model_dir_local", "keep_versions"})),
}


def role(step: str) -> str:
    """The WIRING key of a registry step: train_tf and train_mpi are "train"."""
    return "train" if step in ("train", "train_tf", "train_mpi") else step


def wiring(kind: str) -> tuple[StepWiring, ...]:
    """The steps of the `kind` pipeline in order: sync, train, then the lifecycle steps."""
    return tuple(WIRING[step] for step in ("sync", "train", *PIPELINES[kind].after))


def spelled(step: str, param: str) -> str:
    """A step parameter's name as a pipeline's run parameter (underscores; Argo dashes it)."""
    return WIRING[role(step)].prefix + param


@dataclass(frozen=True)
class RunInput:
    """A run parameter: the step parameters it feeds (the first gives its type, default and, with
    no help of its own, its help), a help of its own where the step's would mislead, and
    `required` where the pipeline needs a value the step can do without. Its Argo name is the
    first feed `spelled`, dashed."""

    name: str
    feeds: tuple[tuple[str, str], ...]
    help: str = ""
    required: bool = False
    switch: bool = False  # a pipeline-only on/off (bool, default true) that feeds no step parameter
    default: Any = None  # the pipeline's default where the step's is None (a number KFP cannot leave unset)


SERVE_SWITCH = RunInput("serve_model", (), "serve the exported model with TF Serving after training (false: skip the "
                        "serve step)", switch=True)
# The train step's shape parameters a run takes as they are, besides run_parameters().
_SHAPE = {"train_tf": ("workers", "ps", "args"), "train_mpi": ("workers", "slots_per_worker", "command", "mpiexec_args")}


def _train_inputs(train: str, after: tuple[str, ...]) -> tuple[RunInput, ...]:
    log_pvc = {"tensorboard": ("tensorboard", "log_pvc"), "serve": ("serve", "pvc")}
    return (
        RunInput("model_name", ((train, "name"),),
                 "name of the model; the training job is named after it (DNS label; pods are <name>-<task>-<index>)"),
        RunInput("dataset_url", (("sync", "src"),),
                 "the dataset: hdfs://, viewfs://, webhdfs://, file:// or any fsspec URL"),
        RunInput("data_pvc", ((train, "data_pvc"),),
                 "PVC the dataset is staged into, in its directory <model_name>/; the training pods mount that "
                 "directory (read-only) at data_dir"),
        RunInput("image", ((train, "image"),)),
        RunInput("timeout", ((train, "timeout"),),
                 "seconds the training job may take from submission; then it is aborted and the run fails "
                 "(a gang that never fits would otherwise keep the run, and every later scheduled run, waiting)",
                 default=float(_SHARED["train"]["timeout"])),
        *(RunInput(name, ((train, name),)) for name in _SHAPE[train] + run_parameters()),
        RunInput("log_pvc", ((train, "log_pvc"), *(log_pvc[step] for step in after if step in log_pvc)),
                 "PVC for logs, checkpoints and the exported model (every training task); TensorBoard reads it"
                 + (", TF Serving serves <log_pvc>/export/<model_name>/" if "serve" in after else "")),
        RunInput("namespace", ((train, "namespace"), ("finish_run", "namespace")),
                 "namespace of the training job (empty: the namespace the pipeline runs in)"),
        RunInput("kubeconfig", ((train, "kubeconfig"), ("finish_run", "kubeconfig"),
                                *((step, "kubeconfig") for step in after)),
                 "kubeconfig file in the step pod; empty: the step pod's in-cluster identity (the normal case)"),
        RunInput("sync_include", (("sync", "include"),), "sync only files matching these globs ('**' crosses directories)"),
        RunInput("sync_exclude", (("sync", "exclude"),), "skip files matching these globs"),
        RunInput("sync_delete", (("sync", "delete"),), "remove staged files that are no longer in the dataset"),
        RunInput("sync_checksum", (("sync", "checksum"),), "compare and verify by content hash, not size + mtime"),
        RunInput("sync_transfers", (("sync", "transfers"),), "parallel file transfers"),
        RunInput("sync_workers", (("sync", "workers"),),
                 "copy pods: 1, the sync step copies; more, the step plans once and a Volcano Job of that many copy "
                 "pods copies, each mounting the data PVC (docs/sync.md)"),
        RunInput("sync_queue", (("sync", "queue"),), "Volcano queue of the copy pods (sync_workers above 1)"),
        RunInput("hdfs_user", (("sync", "user"),), "HDFS simple-auth user (empty: $HADOOP_USER_NAME or the pod's user)"),
        RunInput("kerberos_principal", (("sync", "kerberos_principal"),),
                 "Kerberos principal of the sync step (with kerberos_keytab; empty: no Kerberos)"),
        # Its help names where KFP mounts the keytab Secret (kfp/pipelines.py gives it).
        RunInput("kerberos_keytab", (("sync", "kerberos_keytab"),)),
        RunInput("on_failure", (("finish_run", "on_failure"),)),
    )


def _lifecycle_inputs(after: tuple[str, ...]) -> tuple[RunInput, ...]:
    board = (
        RunInput("tensorboard_logdir", (("tensorboard", "logdir"),),
                 "sub-path of the log PVC that TensorBoard reads (default: the PVC's root)"),
        *(RunInput(f"tensorboard_{name}", (("tensorboard", name),)) for name in ("service_type", "ingress_path", "image",
                                                                                  "timeout")),
        # Where TensorBoard runs: its log PVC may be reachable only from some nodes (a node-local
        # volume, a storage pool behind a taint), which the training pods' placement does not cover.
        *(RunInput(f"tensorboard_{name}", (("tensorboard", name),)) for name in ("node_selector", "tolerations",
                                                                                  "labels")),
    )
    reap = (RunInput("reap_grace", (("reap", "grace"),)),) if "reap" in after else ()
    serve = (
        SERVE_SWITCH,
        RunInput("serving_model_path", (("serve", "model_path"),),
                 "the model's base path on the log PVC, holding numbered versions (default: export/<model_name>)"),
        *(RunInput(f"serving_{name}", (("serve", name),)) for name in ("image", "replicas", "cpu", "memory",
                                                                        "version_policy", "smoke_payload", "timeout",
                                                                        "labels")),
    ) if "serve" in after else ()
    return reap + board + serve


def run_inputs(kind: str) -> tuple[RunInput, ...]:
    """The run parameters of the `kind` pipeline (KFP's run form; Argo offers these and the rest
    of each step's parameters)."""
    shape = PIPELINES[kind]
    return _train_inputs(shape.train, shape.after) + _lifecycle_inputs(shape.after)
