"""Typed specs for the jobs this package builds. Plain frozen dataclasses: the builders turn
them into Volcano Job dicts, `validate` checks them, front ends fill them from arguments."""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from volcano_pipelines.declaration import arg
from volcano_pipelines.volcano.tasks import MPI_TASKS, TF_TASKS

__all__ = ["POD_SECURITY_LEVELS", "MPI_MASTER_RESOURCES", "MPI_TASKS", "TF_TASKS", "DEFAULT_MPI_IMAGE", "DEFAULT_TF_IMAGE", "DEFAULT_TF_PORT", "CodeSource", "JobOptions", "JobPolicy", "JobTarget", "PodSecurityLevel", "MPIJobSpec", "Resources", "Role", "Storage", "TFJobSpec"]

DEFAULT_TF_IMAGE = "tensorflow/tensorflow:2.16.1"
DEFAULT_MPI_IMAGE = "volcanosh/example-mpi:0.0.3"
DEFAULT_TF_PORT = 2222
# The Pod Security Standards levels a job's pods can be built to meet (privileged is never needed).
PodSecurityLevel = Literal["baseline", "restricted"]
POD_SECURITY_LEVELS: tuple[str, ...] = typing.get_args(PodSecurityLevel)


@dataclass(frozen=True)
class Resources:
    """Per-replica requests. Memory and GPUs are also the limit; CPU is not limited."""

    cpu: str | None = "1"
    memory: str | None = "2Gi"
    gpu: int = 0


# What the MPI master (mpiexec, not a training process) requests unless told otherwise.
MPI_MASTER_RESOURCES = Resources(cpu="500m", memory="512Mi")


@dataclass(frozen=True)
class Role:
    """One task of the job (ps, worker, chief, evaluator, mpimaster, mpiworker)."""

    replicas: int = 1
    image: str | None = None  # None: the job's image
    resources: Resources = field(default_factory=Resources)
    env: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CodeSource:
    """Where the training code comes from (exactly one of url / path, or neither: the image's
    working directory). A url ending in '/' is a directory listing fetched recursively; a url
    to .tar.gz / .tgz / .tar / .zip is unpacked; any other url is one file."""

    url: str | None = None
    sha256: str | None = None
    path: str | None = None
    pvc: str | None = None  # the PVC holding `path`; None: `path` is inside the image
    entry: str = "run.sh"


@dataclass(frozen=True)
class Storage:
    """The job's volumes (a train step's parameters of the same names)."""

    data_pvc: str | None = arg(None, "PVC with the training data (read-only on workers, chief, evaluator)",
                               spec="storage.data_pvc", mpi="PVC with the training data (read-only on every task)")
    data_dir: str = arg("/data", "where the data is mounted", spec="storage.data_dir", pipeline=True)
    data_subpath: str | None = arg(None, "directory inside data_pvc that is mounted at data_dir (default: the PVC's "
                                         "root), e.g. the dataset's own directory when several share one PVC",
                                   spec="storage.data_subpath")
    log_pvc: str | None = arg(None, "PVC for logs and checkpoints (every task)", spec="storage.log_pvc")
    log_dir: str = arg("/logs", "where the log PVC is mounted", spec="storage.log_dir")


# kw_only: JobOptions adds `name`, without a default, after these fields; it stays the one
# positional argument (JobOptions("mnist", queue="q")), as it was before they were split out.
@dataclass(frozen=True, kw_only=True)
class JobTarget:
    """Where the job goes and what it runs (the first of the train steps' parameters)."""

    namespace: str = arg("default", "namespace of the job", spec="job.namespace")
    image: str | None = arg(None, "image of every task (per task: task_images)", spec="job.image")  # None: the framework's


@dataclass(frozen=True, kw_only=True)
class JobPolicy:
    """How Volcano schedules, retries and keeps the job, and what its pods carry. Declared
    once, here: the train steps take these as parameters (steps/_job_params.py), the
    builders read them from JobOptions; `pipeline=True`: a train-and-serve run takes it too."""

    queue: str = arg("default", "Volcano queue", spec="job.queue", pipeline=True)
    priority_class: str | None = arg(None, "PriorityClass of the job and its pods", spec="job.priority_class", pipeline=True)
    min_available: int | None = arg(None, "gang size (default: every replica)", spec="job.min_available")
    max_retry: int = arg(3, "runs of the job in all, the first included, before it is Failed (Volcano's maxRetry: "
                            "3 = at most 2 restarts)", spec="job.max_retry", pipeline=True)
    ttl: int | None = arg(3600, "seconds a finished job is kept", spec="job.ttl", pipeline=True)
    deadline: int | None = arg(None, "seconds each pod may run (activeDeadlineSeconds, per attempt): a pod past it "
                                     "fails (DeadlineExceeded), which restarts or ends the job like any failed pod",
                               spec="job.deadline")
    istio_sidecar: bool = arg(False, "let a service mesh inject its sidecar into the pods (default: every pod carries "
                                     "sidecar.istio.io/inject=false, since in an Istio-injected namespace a sidecar "
                                     "keeps a finished task's pod running and the job never completes)",
                              spec="job.istio_sidecar", pipeline=True)
    pod_security: PodSecurityLevel = arg(
        "baseline", "Pod Security Standards level the pods meet: baseline, or restricted for a namespace that enforces "
                    "it (non-root, RuntimeDefault seccomp, no privilege escalation, no capabilities; the image must run "
                    "as a numeric non-root user, as the project's trainer-tf image does)", spec="job.pod_security",
        pipeline=True, mpi="Pod Security Standards level the pods meet: baseline only (the MPI workers' sshd needs root)")
    restart_on_failure: bool = arg(True, "a failed pod restarts the whole job (bounded by max_retry); false: it ends "
                                         "the job (Terminated)", spec="job.restart_on_failure")
    image_pull_secrets: Sequence[str] | None = arg(None, "pull secrets of every pod", spec="job.image_pull_secrets",
                                                   pipeline=True)
    service_account: str | None = arg(None, "ServiceAccount of the pods", spec="job.service_account", pipeline=True)
    run_id: str | None = arg(None, "run identity: a re-run with the same id attaches instead of creating (default "
                                   "$VPIPE_RUN_ID, else a new one)", spec="job.run_id")
    labels: Mapping[str, str] | None = arg(None, "labels on the job and its pods", spec="job.labels")
    owner: str | None = arg(None, "owner of the job, API_VERSION/KIND/NAME/UID in the job's namespace (e.g. an Argo "
                                  "Workflow: argoproj.io/v1alpha1/Workflow/NAME/UID): deleting the owner deletes the "
                                  "job (Kubernetes' garbage collector); not set when the step does not wait (the job "
                                  "must outlive the run)", spec="job.owner")


@dataclass(frozen=True)
class JobOptions(JobTarget, JobPolicy):
    """What every Volcano job of ours has, whatever the framework: its name, JobTarget and
    JobPolicy (an unset pull-secret list or label map is empty)."""

    name: str


@dataclass(frozen=True)
class TFJobSpec:
    job: JobOptions
    code: CodeSource = field(default_factory=CodeSource)
    storage: Storage = field(default_factory=Storage)
    ps: Role = field(default_factory=Role)
    worker: Role = field(default_factory=Role)
    chief: Role | None = None
    evaluator: Role | None = None
    args: tuple[str, ...] = ()  # appended verbatim to the entry point's arguments
    port: int = DEFAULT_TF_PORT


@dataclass(frozen=True)
class MPIJobSpec:
    job: JobOptions
    command: tuple[str, ...]  # the program mpiexec runs on every slot, argv form
    code: CodeSource = field(default_factory=CodeSource)
    storage: Storage = field(default_factory=Storage)
    master: Role = field(default_factory=lambda: Role(resources=MPI_MASTER_RESOURCES))
    worker: Role = field(default_factory=Role)
    slots_per_worker: int = 1
    mpiexec_args: tuple[str, ...] = ()  # extra mpiexec options, verbatim
