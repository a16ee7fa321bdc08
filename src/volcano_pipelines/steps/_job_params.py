"""The train steps' parameters, each declared once: type, default, help and the spec path it
fills, in groups (the job's target and policy, its code, storage, per-task settings, the TF and
MPI shapes, how a run waits). `render_tf`, `render_mpi`, `train_tf` and `train_mpi` get their
flat signatures and docstrings from these (interface/params.py `declare`), the CLI flags, KFP
inputs and Argo parameters from those, and the job specs are filled by the spec paths here
(steps/_train_spec.py).

The groups the pure job spec has field for field (JobTarget, JobPolicy, Storage) are declared
in volcano/spec.py, where the builders read them: a new job option is one field there plus
the builder logic that uses it. The groups here are the step's own wording of the rest."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict, get_args

from volcano_pipelines.backends.base import OnCancel
from volcano_pipelines.k8s.connection import NAMESPACE, Connection
from volcano_pipelines.interface.params import arg, declared
from volcano_pipelines.volcano.spec import DEFAULT_TF_PORT, JobPolicy, JobTarget, PodSecurityLevel, Storage
from volcano_pipelines.volcano.stalls import OnStall

__all__ = ["ALL_GROUPS", "BACKENDS", "BackendName", "Code", "Connection", "JobPolicy", "JobTarget", "MPICommand", "MPIShape",
           "RenderMPIArgs", "RenderTFArgs", "Run", "Storage", "TFShape", "Tasks", "TrainMPIArgs", "TrainTFArgs", "spec_params"]

# Where a train step runs its job.
BackendName = Literal["cluster", "local"]
BACKENDS: tuple[str, ...] = get_args(BackendName)


@dataclass(frozen=True)
class TFShape:
    ps: int = arg(1, "parameter servers", spec="ps.replicas")
    workers: int = arg(1, "workers", spec="worker.replicas")
    chief: bool = arg(False, "add a chief; the job completes when it does")
    evaluator: bool = arg(False, "add an evaluator (outside the cluster spec)")
    port: int = arg(DEFAULT_TF_PORT, "gRPC port of every task", spec="port")
    args: Sequence[str] | None = arg(None, "extra arguments for the entry point, verbatim", spec="args")


@dataclass(frozen=True)
class MPICommand:
    command: Sequence[str] = arg((), "the program mpiexec runs on every slot, and its arguments", spec="command")


@dataclass(frozen=True)
class MPIShape:
    workers: int = arg(2, "mpiworker pods", spec="mpiworker.replicas")
    slots_per_worker: int = arg(1, "MPI slots per worker", spec="slots_per_worker")
    mpiexec_args: Sequence[str] | None = arg(None, "extra mpiexec options, verbatim", spec="mpiexec_args")


@dataclass(frozen=True)
class Code:
    code_url: str | None = arg(None, "http(s) URL of the code: a directory ending in '/', an archive, or one file",
                               spec="code.url", pipeline=True)
    code_sha256: str | None = arg(None, "expected SHA-256 of the file or archive at code_url", spec="code.sha256", pipeline=True)
    code_path: str | None = arg(None, "code directory inside the image, or on code_pvc", spec="code.path")
    code_pvc: str | None = arg(None, "PVC holding code_path", spec="code.pvc")
    entry: str = arg("run.sh", "entry point inside the code directory", spec="code.entry", pipeline=True)


@dataclass(frozen=True)
class Tasks:
    """Per-task settings: dicts keyed by task name ('' for every task)."""

    task_images: Mapping[str, str] | None = arg(None, 'image per task, e.g. {"worker": "registry.example/trainer-gpu:2.16"}', spec="*.image",
                                                mpi="image per task (mpimaster, mpiworker)")
    cpu: Mapping[str, str] | None = arg(None, "CPU request per task ('' for every task), e.g. {\"worker\": \"4\"}",
                                        spec="*.resources.cpu",
                                        mpi="CPU request per task ('' for every task); mpimaster defaults to 500m", pipeline=True)
    memory: Mapping[str, str] | None = arg(None, 'memory request and limit per task, e.g. {"ps": "8Gi"}',
                                           spec="*.resources.memory",
                                           mpi="memory request and limit per task; mpimaster defaults to 512Mi", pipeline=True)
    gpus: Mapping[str, int] | None = arg(None, "nvidia.com/gpu per pod, per task", spec="*.resources.gpu", pipeline=True)
    env: Mapping[str, Mapping[str, str]] | None = arg(
        None, 'environment per task, e.g. {"": {"A": "1"}, "worker": {"B": "2"}}', spec="*.env",
        mpi='environment per task, e.g. {"": {"A": "1"}, "mpiworker": {"B": "2"}}', pipeline=True)
    pod_labels: Mapping[str, Mapping[str, str]] | None = arg(None, "pod labels per task", spec="*.labels", pipeline=True)
    pod_annotations: Mapping[str, Mapping[str, str]] | None = arg(None, "pod annotations per task",
                                                                  spec="*.annotations")
    node_selector: Mapping[str, Mapping[str, str]] | None = arg(None, "node selector per task", spec="*.node_selector", pipeline=True)
    tolerations: Mapping[str, Sequence[str]] | None = arg(
        None, "tolerations per task, kubectl taint form KEY[=VALUE]:EFFECT", spec="*.tolerations", pipeline=True)


@dataclass(frozen=True)
class Run:
    """How a train step runs its job (not part of the job)."""

    backend: BackendName = arg("cluster", "where the job runs: cluster (Kubernetes + Volcano) or local (processes "
                                          "on this machine)")
    connection: Connection = arg(Connection(), "the cluster the job goes to (Connection: its configuration file and context)")
    namespace: str | None = arg(None, NAMESPACE.help_for("train"))
    timeout: float | None = arg(None, "seconds to wait before the job is aborted and the step fails")
    on_cancel: OnCancel = arg("delete", "what SIGTERM / Ctrl-C does to the job: delete, abort or keep", pipeline=True)
    on_pod_deleted: OnCancel | None = arg(
        None, "what SIGTERM does to the job when it comes because the step's own pod is being deleted (evicted, "
              "drained, deleted; $VPIPE_POD_NAME names the pod): keep lets a retried step attach to the job "
              "(default: as on_cancel)")
    dry_run: bool = arg(False, "build and check the job; create nothing")
    wait: bool = arg(True, "wait for the job to finish (false: submit and return)")
    log_lines: int = arg(20, "last log lines of a failed pod to report")
    progress_interval: float = arg(15.0, "seconds between reads of the training's progress reports (the last lines of "
                                         "the chief's / MPI master's / worker 0's log, docs/progress.md); 0: do not "
                                         "follow progress")
    stall_timeout: int = arg(600, "seconds a task may go without progress (or, for one that makes no steps, "
                                      "without a heartbeat) before it is named stalled (docs/progress.md, hung "
                                      "tasks; read with the progress reports); 0: no stall detection", pipeline=True)
    on_stall: OnStall = arg("warn", "what a stalled task does to the job: warn (name it and wait on), fail (abort "
                                    "the job, fail the step) or restart (restart the job from its checkpoint)",
                            pipeline=True)
    local_dir: str | None = arg(None, "local backend: working directory for the job's files (default ./vpipe-local)")
    local_data_dir: str | None = arg(None, "local backend: the directory standing in for the data volume (default "
                                           "<local_dir>/data)")
    local_log_dir: str | None = arg(None, "local backend: the directory standing in for the log volume (default "
                                          "<local_dir>/logs)")


ALL_GROUPS = (JobTarget, TFShape, MPICommand, MPIShape, JobPolicy, Code, Storage, Tasks)


@functools.cache
def spec_params() -> dict[str, str]:
    """Spec path -> the argument that fills it (`job.max_retry` -> `max_retry`,
    `*.resources.cpu` -> `cpu`): what an error found in the spec is renamed to."""
    declared_paths = {doc.spec: name for name, _, _, doc in declared(*ALL_GROUPS) if doc.spec}
    return {"job.name": "name", **declared_paths}  # the name: every train step's first argument



# --- the same parameters, for a reader, an editor and mypy ---------------------------------------
# A train step receives its declared parameters in **job (`declare` gives it the flat signature at
# run time). `**job: Unpack[TrainTFArgs]` names them where the step is written: an editor lists
# them and goes to them from a call, and mypy checks a Python caller's keywords and values.
# Names and types only: each default and help is its group's, above.
# tests/unit/steps/test_job_params.py holds each step's dict equal to its declared signature.

class _Image(TypedDict, total=False):
    image: str | None


class _RenderTarget(_Image, total=False):
    namespace: str  # a render step's; a train step's is Run's (None: the context's)


class _TFShape(TypedDict, total=False):  # each _Name: the group Name's fields
    ps: int
    workers: int
    chief: bool
    evaluator: bool
    port: int
    args: Sequence[str] | None


class _MPIShape(TypedDict, total=False):
    command: Sequence[str]  # MPICommand's
    workers: int
    slots_per_worker: int
    mpiexec_args: Sequence[str] | None


class _JobPolicy(TypedDict, total=False):
    queue: str
    priority_class: str | None
    min_available: int | None
    max_retry: int
    ttl: int | None
    deadline: int | None
    istio_sidecar: bool
    pod_security: PodSecurityLevel
    restart_on_failure: bool
    image_pull_secrets: Sequence[str] | None
    service_account: str | None
    run_id: str | None
    labels: Mapping[str, str] | None
    owner: str | None


class _Code(TypedDict, total=False):
    code_url: str | None
    code_sha256: str | None
    code_path: str | None
    code_pvc: str | None
    entry: str


class _Storage(TypedDict, total=False):
    data_pvc: str | None
    data_dir: str
    data_subpath: str | None
    log_pvc: str | None
    log_dir: str


class _Tasks(TypedDict, total=False):
    task_images: Mapping[str, str] | None
    cpu: Mapping[str, str] | None
    memory: Mapping[str, str] | None
    gpus: Mapping[str, int] | None
    env: Mapping[str, Mapping[str, str]] | None
    pod_labels: Mapping[str, Mapping[str, str]] | None
    pod_annotations: Mapping[str, Mapping[str, str]] | None
    node_selector: Mapping[str, Mapping[str, str]] | None
    tolerations: Mapping[str, Sequence[str]] | None


class _Run(TypedDict, total=False):
    backend: BackendName
    connection: Connection
    namespace: str | None
    timeout: float | None
    on_cancel: OnCancel
    on_pod_deleted: OnCancel | None
    dry_run: bool
    wait: bool
    log_lines: int
    progress_interval: float
    stall_timeout: int
    on_stall: OnStall
    local_dir: str | None
    local_data_dir: str | None
    local_log_dir: str | None


class RenderTFArgs(_RenderTarget, _TFShape, _JobPolicy, _Code, _Storage, _Tasks, total=False):
    """render_tf's keyword arguments."""


class RenderMPIArgs(_RenderTarget, _MPIShape, _JobPolicy, _Code, _Storage, _Tasks, total=False):
    """render_mpi's keyword arguments."""


class TrainTFArgs(_Run, _Image, _TFShape, _JobPolicy, _Code, _Storage, _Tasks, total=False):
    """train_tf's keyword arguments (render_tf's, with Run's namespace)."""


class TrainMPIArgs(_Run, _Image, _MPIShape, _JobPolicy, _Code, _Storage, _Tasks, total=False):
    """train_mpi's keyword arguments (render_mpi's, with Run's namespace)."""
