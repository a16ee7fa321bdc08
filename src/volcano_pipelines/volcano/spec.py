"""Typed specs for the jobs this package builds. Plain frozen dataclasses: the builders turn
them into Volcano Job dicts, `validate` checks them, front ends fill them from arguments."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["POD_SECURITY_LEVELS", "MPI_MASTER_RESOURCES", "MPI_TASKS", "TF_TASKS", "DEFAULT_MPI_IMAGE", "DEFAULT_TF_IMAGE", "DEFAULT_TF_PORT", "CodeSource", "JobOptions", "MPIJobSpec", "Resources", "Role", "Storage", "TFJobSpec"]

DEFAULT_TF_IMAGE = "tensorflow/tensorflow:2.16.1"
DEFAULT_MPI_IMAGE = "volcanosh/example-mpi:0.0.3"
DEFAULT_TF_PORT = 2222
# The Pod Security Standards levels a job's pods can be built to meet (privileged is never needed).
POD_SECURITY_LEVELS = ("baseline", "restricted")
# The tasks (Volcano task names) of each kind of job.
TF_TASKS = ("ps", "worker", "chief", "evaluator")
MPI_TASKS = ("mpimaster", "mpiworker")


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
    data_pvc: str | None = None
    data_dir: str = "/data"
    data_subpath: str | None = None  # a directory inside data_pvc mounted at data_dir; None: the PVC's root
    log_pvc: str | None = None
    log_dir: str = "/logs"


@dataclass(frozen=True)
class JobOptions:
    """What every Volcano job of ours has, whatever the framework."""

    name: str
    namespace: str = "default"
    image: str | None = None  # None: the framework default
    queue: str = "default"
    priority_class: str | None = None
    min_available: int | None = None  # None: every replica (gang)
    max_retry: int = 3
    ttl: int | None = 3600
    deadline: int | None = None  # every pod's activeDeadlineSeconds
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    run_id: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # on the Job and every pod
    owner: str | None = None  # API_VERSION/KIND/NAME/UID: metadata.ownerReferences of the Job
    restart_on_failure: bool = True  # PodFailed -> RestartJob (bounded by max_retry), else TerminateJob
    istio_sidecar: bool = False  # False: every pod opts out of sidecar injection (kube/pods.mesh_opt_out)
    pod_security: str = "baseline"  # the Pod Security Standards level the pods are built to meet (POD_SECURITY_LEVELS)


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
