"""The train steps: `train_tf` and `train_mpi` build a Volcano Job from flat arguments, submit
it to a backend (or attach to the one this run already submitted), wait for its end and
report what happened; `render_tf` / `render_mpi` only build it. Every front end (CLI, KFP,
Argo, Python) calls these functions and nothing else."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from volcano_pipelines.backends.base import ON_CANCEL_CHOICES, Backend
from volcano_pipelines.errors import InputError
from volcano_pipelines.kube.validate import check_positive_seconds
from volcano_pipelines.progress import Progress  # at run time: front ends read the type hints
from volcano_pipelines.steps import train_spec
from volcano_pipelines.steps.params import extend_signature
from volcano_pipelines.steps.results import TrainResult
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import DEFAULT_TF_PORT
from volcano_pipelines.volcano.tf import build_tf_job

__all__ = ["BACKENDS", "ON_CANCEL_CHOICES", "TrainResult", "render_mpi", "render_tf", "status", "train_mpi", "train_tf"]

RUN_ID_ENV = "VPIPE_RUN_ID"
BACKENDS = ("cluster", "local")


def render_tf(
    name: str,
    *,
    namespace: str = "default",
    image: str | None = None,
    ps: int = 1,
    workers: int = 1,
    chief: bool = False,
    evaluator: bool = False,
    port: int = DEFAULT_TF_PORT,
    args: Sequence[str] | None = None,
    queue: str = "default",
    priority_class: str | None = None,
    min_available: int | None = None,
    max_retry: int = 3,
    ttl: int | None = 3600,
    restart_on_failure: bool = True,
    image_pull_secrets: Sequence[str] | None = None,
    service_account: str | None = None,
    run_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    code_url: str | None = None,
    code_sha256: str | None = None,
    code_path: str | None = None,
    code_pvc: str | None = None,
    entry: str = "run.sh",
    data_pvc: str | None = None,
    data_dir: str = "/data",
    log_pvc: str | None = None,
    log_dir: str = "/logs",
    task_images: Mapping[str, str] | None = None,
    cpu: Mapping[str, str] | None = None,
    memory: Mapping[str, str] | None = None,
    gpus: Mapping[str, int] | None = None,
    env: Mapping[str, Mapping[str, str]] | None = None,
    pod_labels: Mapping[str, Mapping[str, str]] | None = None,
    pod_annotations: Mapping[str, Mapping[str, str]] | None = None,
    node_selector: Mapping[str, Mapping[str, str]] | None = None,
    tolerations: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The Volcano Job for distributed TensorFlow: parameter servers + workers (+ chief,
    evaluator). Nothing is sent anywhere.

    Args:
        name: job name (DNS label); pods are <name>-<task>-<index>
        namespace: namespace of the job
        image: image of every task (per task: task_images)
        ps: parameter servers
        workers: workers
        chief: add a chief; the job completes when it does
        evaluator: add an evaluator (outside the cluster spec)
        port: gRPC port of every task
        args: extra arguments for the entry point, verbatim
        queue: Volcano queue
        priority_class: PriorityClass of the job and its pods
        min_available: gang size (default: every replica)
        max_retry: runs of the job in all, the first included, before it is Failed (Volcano's maxRetry: 3 = at most 2 restarts)
        ttl: seconds a finished job is kept
        restart_on_failure: a failed pod restarts the whole job (bounded by max_retry); false: it ends the job (Terminated)
        image_pull_secrets: pull secrets of every pod
        service_account: ServiceAccount of the pods
        run_id: run identity: a re-run with the same id attaches instead of creating (default $VPIPE_RUN_ID, else a new one)
        labels: labels on the job and its pods
        code_url: http(s) URL of the code: a directory ending in '/', an archive, or one file
        code_sha256: expected SHA-256 of the file or archive at code_url
        code_path: code directory inside the image, or on code_pvc
        code_pvc: PVC holding code_path
        entry: entry point inside the code directory
        data_pvc: PVC with the training data (read-only on workers, chief, evaluator)
        data_dir: where the data is mounted
        log_pvc: PVC for logs and checkpoints (every task)
        log_dir: where the log PVC is mounted
        task_images: image per task, e.g. {"worker": "gpu:1"}
        cpu: CPU request per task ('' for every task), e.g. {"worker": "4"}
        memory: memory request and limit per task, e.g. {"ps": "8Gi"}
        gpus: nvidia.com/gpu per pod, per task
        env: environment per task, e.g. {"": {"A": "1"}, "worker": {"B": "2"}}
        pod_labels: pod labels per task
        pod_annotations: pod annotations per task
        node_selector: node selector per task
        tolerations: tolerations per task, kubectl taint form KEY[=VALUE]:EFFECT
    """
    arguments = locals()
    with train_spec.named_by_params():
        return build_tf_job(train_spec.tf_spec(**arguments))


def render_mpi(
    name: str,
    *,
    command: Sequence[str] = (),
    namespace: str = "default",
    image: str | None = None,
    workers: int = 2,
    slots_per_worker: int = 1,
    mpiexec_args: Sequence[str] | None = None,
    queue: str = "default",
    priority_class: str | None = None,
    min_available: int | None = None,
    max_retry: int = 3,
    ttl: int | None = 3600,
    restart_on_failure: bool = True,
    image_pull_secrets: Sequence[str] | None = None,
    service_account: str | None = None,
    run_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    code_url: str | None = None,
    code_sha256: str | None = None,
    code_path: str | None = None,
    code_pvc: str | None = None,
    entry: str = "run.sh",
    data_pvc: str | None = None,
    data_dir: str = "/data",
    log_pvc: str | None = None,
    log_dir: str = "/logs",
    task_images: Mapping[str, str] | None = None,
    cpu: Mapping[str, str] | None = None,
    memory: Mapping[str, str] | None = None,
    gpus: Mapping[str, int] | None = None,
    env: Mapping[str, Mapping[str, str]] | None = None,
    pod_labels: Mapping[str, Mapping[str, str]] | None = None,
    pod_annotations: Mapping[str, Mapping[str, str]] | None = None,
    node_selector: Mapping[str, Mapping[str, str]] | None = None,
    tolerations: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The Volcano Job for MPI: one mpimaster running mpiexec over N mpiworker pods (ssh +
    svc plugins). Nothing is sent anywhere.

    Args:
        name: job name (DNS label); pods are <name>-<task>-<index>
        command: the program mpiexec runs on every slot, and its arguments
        namespace: namespace of the job
        image: image of every task (per task: task_images)
        workers: mpiworker pods
        slots_per_worker: MPI slots per worker
        mpiexec_args: extra mpiexec options, verbatim
        queue: Volcano queue
        priority_class: PriorityClass of the job and its pods
        min_available: gang size (default: every replica)
        max_retry: runs of the job in all, the first included, before it is Failed (Volcano's maxRetry: 3 = at most 2 restarts)
        ttl: seconds a finished job is kept
        restart_on_failure: a failed pod restarts the whole job (bounded by max_retry); false: it ends the job (Terminated)
        image_pull_secrets: pull secrets of every pod
        service_account: ServiceAccount of the pods
        run_id: run identity: a re-run with the same id attaches instead of creating (default $VPIPE_RUN_ID, else a new one)
        labels: labels on the job and its pods
        code_url: http(s) URL of the code: a directory ending in '/', an archive, or one file
        code_sha256: expected SHA-256 of the file or archive at code_url
        code_path: code directory inside the image, or on code_pvc
        code_pvc: PVC holding code_path
        entry: entry point inside the code directory
        data_pvc: PVC with the training data (read-only on every task)
        data_dir: where the data is mounted
        log_pvc: PVC for logs and checkpoints (every task)
        log_dir: where the log PVC is mounted
        task_images: image per task (mpimaster, mpiworker)
        cpu: CPU request per task ('' for every task); mpimaster defaults to 500m
        memory: memory request and limit per task; mpimaster defaults to 512Mi
        gpus: nvidia.com/gpu per pod, per task
        env: environment per task, e.g. {"": {"A": "1"}, "mpiworker": {"B": "2"}}
        pod_labels: pod labels per task
        pod_annotations: pod annotations per task
        node_selector: node selector per task
        tolerations: tolerations per task, kubectl taint form KEY[=VALUE]:EFFECT
    """
    arguments = locals()
    with train_spec.named_by_params():
        return build_mpi_job(train_spec.mpi_spec(**arguments))


@extend_signature(render_tf)
def train_tf(
    name: str,
    *,
    backend: str = "cluster",
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    timeout: float | None = None,
    on_cancel: str = "delete",
    dry_run: bool = False,
    wait: bool = True,
    log_lines: int = 20,
    local_dir: str | None = None,
    local_data_dir: str | None = None,
    local_log_dir: str | None = None,
    progress: Progress | None = None,
    **job: Any,
) -> TrainResult:
    """Submit a distributed TensorFlow job: parameter servers + workers (+ chief, evaluator),
    and wait for it to finish. Takes every argument of render_tf too.

    Args:
        name: job name (DNS label); pods are <name>-<task>-<index>
        backend: where the job runs: cluster (Kubernetes + Volcano) or local (processes on this machine)
        kubeconfig: kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)
        context: kubeconfig context
        namespace: namespace of the job (default: the context's namespace, else default)
        timeout: seconds to wait before the job is aborted and the step fails
        on_cancel: what SIGTERM / Ctrl-C does to the job: delete, abort or keep
        dry_run: build and check the job; create nothing
        wait: wait for the job to finish (false: submit and return)
        log_lines: last log lines of a failed pod to report
        local_dir: local backend: working directory for the job's files (default ./vpipe-local)
        local_data_dir: local backend: the directory standing in for the data volume (default <local_dir>/data)
        local_log_dir: local backend: the directory standing in for the log volume (default <local_dir>/logs)
    """
    return _train(render_tf, name, job, backend=backend, kubeconfig=kubeconfig, context=context, namespace=namespace,
                  timeout=timeout, on_cancel=on_cancel, dry_run=dry_run, wait=wait, log_lines=log_lines,
                  local=(local_dir, local_data_dir, local_log_dir), progress=progress)


@extend_signature(render_mpi)
def train_mpi(
    name: str,
    *,
    backend: str = "cluster",
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    timeout: float | None = None,
    on_cancel: str = "delete",
    dry_run: bool = False,
    wait: bool = True,
    log_lines: int = 20,
    local_dir: str | None = None,
    local_data_dir: str | None = None,
    local_log_dir: str | None = None,
    progress: Progress | None = None,
    **job: Any,
) -> TrainResult:
    """Submit an MPI job: one mpimaster running mpiexec over N mpiworker pods, and wait for it
    to finish. Takes every argument of render_mpi too.

    Args:
        name: job name (DNS label); pods are <name>-<task>-<index>
        backend: where the job runs: cluster (Kubernetes + Volcano) or local (processes on this machine)
        kubeconfig: kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)
        context: kubeconfig context
        namespace: namespace of the job (default: the context's namespace, else default)
        timeout: seconds to wait before the job is aborted and the step fails
        on_cancel: what SIGTERM / Ctrl-C does to the job: delete, abort or keep
        dry_run: build and check the job; create nothing
        wait: wait for the job to finish (false: submit and return)
        log_lines: last log lines of a failed pod to report
        local_dir: local backend: working directory for the job's files (default ./vpipe-local)
        local_data_dir: local backend: the directory standing in for the data volume (default <local_dir>/data)
        local_log_dir: local backend: the directory standing in for the log volume (default <local_dir>/logs)
    """
    return _train(render_mpi, name, job, backend=backend, kubeconfig=kubeconfig, context=context, namespace=namespace,
                  timeout=timeout, on_cancel=on_cancel, dry_run=dry_run, wait=wait, log_lines=log_lines,
                  local=(local_dir, local_data_dir, local_log_dir), progress=progress)


def status(
    name: str,
    *,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    log_lines: int = 20,
) -> TrainResult:
    """A training job's phase, per-task counts and (when it failed) the failing pod.

    Args:
        name: job name
        namespace: namespace of the job (default: the context's namespace, else default)
        kubeconfig: kubeconfig file (default: in-cluster, then $KUBECONFIG / ~/.kube/config)
        context: kubeconfig context
        log_lines: last log lines of a failed pod to report
    """
    from volcano_pipelines.volcano.validate import check_job_ref

    # Before any request: '' would ask for the list URL, `-n ''` for namespaces//jobs.
    check_job_ref("default" if namespace is None else namespace, name)
    from volcano_pipelines.steps.waiting import job_result

    cluster_backend = _cluster_backend(kubeconfig, context)
    namespace = namespace or cluster_backend.cluster.namespace
    return job_result(cluster_backend, namespace, name, log_lines)


def _train(render: Any, name: str, job: dict[str, Any], *, backend: str, kubeconfig: str | None, context: str | None,
           namespace: str | None, timeout: float | None, on_cancel: str, dry_run: bool, wait: bool, log_lines: int,
           local: tuple[str | None, str | None, str | None], progress: Progress | None) -> TrainResult:
    # Everything is checked before the first call to any backend.
    if backend not in BACKENDS:
        raise InputError("backend", backend, f"one of {', '.join(BACKENDS)}")
    if timeout is not None:
        check_positive_seconds("timeout", timeout)
    if on_cancel not in ON_CANCEL_CHOICES:
        raise InputError("on_cancel", on_cancel, f"one of {', '.join(ON_CANCEL_CHOICES)}")
    if not isinstance(log_lines, int) or not 0 <= log_lines <= 10_000:
        raise InputError("log_lines", log_lines, "an integer from 0 to 10000")
    unknown = sorted(set(job) - set(_job_params(render)))
    if unknown:
        raise InputError(unknown[0], job[unknown[0]], f"an argument of {render.__name__.replace('render', 'train')}")
    job["run_id"] = job.get("run_id") or os.environ.get(RUN_ID_ENV) or uuid.uuid4().hex[:16]
    # A namespace named by the caller is checked with the job; the context's is looked up
    # only when the job is really sent.
    manifest = render(name, namespace=namespace or "default", **job)
    if dry_run:
        meta = manifest["metadata"]
        return TrainResult(name=meta["name"], namespace=meta["namespace"], run_id=job["run_id"], phase="DryRun",
                           succeeded=True, backend=backend, message="dry run: nothing was created", manifest=manifest)
    target = _backend(backend, kubeconfig, context, *local)
    if backend == "cluster":
        target.submit_timeout = timeout  # type: ignore[attr-defined]
    if namespace is None and backend == "cluster":
        manifest = render(name, namespace=target.cluster.namespace, **job)  # type: ignore[attr-defined]
    from volcano_pipelines.steps.waiting import WaitPolicy, run  # not needed to render

    policy = WaitPolicy(timeout_seconds=timeout, on_cancel=on_cancel, wait=wait, log_lines=log_lines)
    with train_spec.named_by_params():  # what the cluster refuses (a missing queue) names the argument too
        return run(target, manifest, policy, progress)


def _job_params(render: Any) -> tuple[str, ...]:
    code = render.__code__
    return code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]


def _cluster_backend(kubeconfig: str | None, context: str | None) -> Any:
    from volcano_pipelines.backends.cluster import ClusterBackend
    from volcano_pipelines.k8s.client import connect

    return ClusterBackend(connect(kubeconfig, context))


def _backend(name: str, kubeconfig: str | None, context: str | None, local_dir: str | None,
             local_data_dir: str | None, local_log_dir: str | None) -> Backend:
    if name == "local":
        import sys

        from volcano_pipelines.backends.local import LocalBackend

        # Pod output goes to stderr, so that --json stays alone on stdout.
        return LocalBackend(local_dir or os.path.join(os.getcwd(), "vpipe-local"), local_data_dir, local_log_dir,
                            output=sys.stderr)
    return _cluster_backend(kubeconfig, context)  # type: ignore[no-any-return]
