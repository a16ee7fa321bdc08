"""The train steps: `train_tf` and `train_mpi` build a Volcano Job from flat arguments, submit
it to a backend (or attach to the one this run already submitted), wait for its end and
report what happened; `render_tf` / `render_mpi` only build it. Every front end (CLI, KFP,
Argo, Python) calls these functions and nothing else."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from volcano_pipelines.backends.base import ON_CANCEL_CHOICES, Backend
from volcano_pipelines.errors import InputError
from volcano_pipelines.labels import run_id_or_new
from volcano_pipelines.k8s.connection import Connection, Namespace
from volcano_pipelines.objects.validate import check_positive_seconds
from volcano_pipelines.progress import Progress  # at run time: front ends read the type hints
from volcano_pipelines.steps import _train_spec as train_spec
from volcano_pipelines.steps._job_params import (
    BACKENDS,
    Code,
    JobPolicy,
    JobTarget,
    MPICommand,
    MPIShape,
    RenderMPIArgs,
    RenderTFArgs,
    Run,
    Storage,
    Tasks,
    TFShape,
    TrainMPIArgs,
    TrainTFArgs,
)
from volcano_pipelines.interface.params import bind, check_types, declare, declared, extend_signature
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.stalls import ON_STALL_CHOICES, with_stall_timeout
from volcano_pipelines.volcano.tf import build_tf_job

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11; only read by mypy and editors

    from volcano_pipelines.backends.cluster import ClusterBackend

__all__ = ["BACKENDS", "ON_CANCEL_CHOICES", "TrainResult", "render_mpi", "render_tf", "status", "target_namespace",
           "train_mpi", "train_tf"]

log = logging.getLogger(__name__)

LOCAL_DIR = "vpipe-local"  # the local backend's working directory, under the current one, without local_dir
_RUN_PARAMS = tuple(name for name, _, _, _ in declared(Run))


@declare(JobTarget, TFShape, JobPolicy, Code, Storage, Tasks)
def render_tf(name: str, **job: Unpack[RenderTFArgs]) -> dict[str, Any]:
    """The Volcano Job for distributed TensorFlow: parameter servers + workers (+ chief,
    evaluator). Nothing is sent anywhere.

    Args:
        name: job name (DNS label); pods are <name>-<task>-<index>
    """
    return _render(render_tf, name, job, lambda arguments: build_tf_job(train_spec.tf_spec(**arguments)))


@declare(MPICommand, JobTarget, MPIShape, JobPolicy, Code, Storage, Tasks, kind="mpi")
def render_mpi(name: str, **job: Unpack[RenderMPIArgs]) -> dict[str, Any]:
    """The Volcano Job for MPI: one mpimaster running mpiexec over N mpiworker pods (ssh +
    svc plugins). Nothing is sent anywhere.

    Args:
        name: job name (DNS label); pods are <name>-<task>-<index>
    """
    return _render(render_mpi, name, job, lambda arguments: build_mpi_job(train_spec.mpi_spec(**arguments)))


@extend_signature(render_tf)
@declare(Run)
def train_tf(name: str, *, progress: Progress | None = None, **job: Unpack[TrainTFArgs]) -> TrainResult:
    """Submit a distributed TensorFlow job: parameter servers + workers (+ chief, evaluator),
    and wait for it to finish. Takes every argument of render_tf too.

    Args:
        name: job name (DNS label); pods are <name>-<task>-<index>
    """
    return _train(train_tf, render_tf, name, job, progress)


@extend_signature(render_mpi)
@declare(Run, kind="mpi")
def train_mpi(name: str, *, progress: Progress | None = None, **job: Unpack[TrainMPIArgs]) -> TrainResult:
    """Submit an MPI job: one mpimaster running mpiexec over N mpiworker pods, and wait for it
    to finish. Takes every argument of render_mpi too.

    Args:
        name: job name (DNS label); pods are <name>-<task>-<index>
    """
    return _train(train_mpi, render_mpi, name, job, progress)


def status(
    name: str,
    *,
    namespace: Namespace = None,
    connection: Connection = Connection(),
    log_lines: int = 20,
    post_mortem: bool = False,
    local_dir: str | None = None,
    local_log_dir: str | None = None,
) -> TrainResult:
    """A training job's phase, per-task counts and (when it failed) the failing pod.

    Args:
        name: job name
        log_lines: last log lines of a failed pod to report
        post_mortem: show the job's saved post-mortem record (what happened to every pod) instead of asking the cluster;
            looked for among the cluster jobs' records, then under ./vpipe-local (the local backend's default)
        local_dir: the local backend's working directory the job ran in: show its post-mortem record from there
        local_log_dir: the local backend's log directory the job was given: show its post-mortem record from there
    """
    check_types(status, locals())
    from volcano_pipelines.volcano.validate import check_job_ref

    # Before any request: '' would ask for the list URL, `-n ''` for namespaces//jobs.
    check_job_ref("default" if namespace is None else namespace, name)
    if not 0 <= log_lines <= 10_000:  # the same bound as train's, before any request
        raise InputError("log_lines", log_lines, "an integer from 0 to 10000")
    from volcano_pipelines.steps._waiting import job_result

    for field, given in (("local_dir", local_dir), ("local_log_dir", local_log_dir)):
        if given is not None and not given.strip():  # Path("") is ".": not what was meant (as train refuses it)
            raise InputError(field, given, "a directory path (not empty)")
    if post_mortem or local_dir is not None or local_log_dir is not None:  # a local job leaves only its record
        return _saved_record(name, namespace, connection, _record_places(local_dir, local_log_dir))
    cluster_backend = _cluster_backend(connection)
    namespace = namespace or cluster_backend.cluster.namespace
    return job_result(cluster_backend, namespace, name, log_lines)


def _render(step: Any, name: str, job: Mapping[str, Any], build: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Check the arguments of a render step, then build its job; an error names the argument."""
    arguments = bind(step, name, **job)
    check_types(step, arguments)
    with train_spec.named_by_params():
        return build(arguments)


def _train(step: Any, render: Any, name: str, job: Mapping[str, Any], progress: Progress | None) -> TrainResult:
    arguments = bind(step, name, **job)
    check_types(step, arguments)
    run = {key: arguments.pop(key) for key in _RUN_PARAMS}
    arguments.pop("progress", None)
    arguments.pop("name")
    backend, namespace, timeout, on_cancel = run["backend"], run["namespace"], run["timeout"], run["on_cancel"]
    # Everything is checked before the first call to any backend.
    if backend not in BACKENDS:
        raise InputError("backend", backend, f"one of {', '.join(BACKENDS)}")
    if timeout is not None:
        check_positive_seconds("timeout", timeout)
    if on_cancel not in ON_CANCEL_CHOICES:
        raise InputError("on_cancel", on_cancel, f"one of {', '.join(ON_CANCEL_CHOICES)}")
    on_pod_deleted = run["on_pod_deleted"]
    if on_pod_deleted is not None and on_pod_deleted not in ON_CANCEL_CHOICES:
        raise InputError("on_pod_deleted", on_pod_deleted, f"one of {', '.join(ON_CANCEL_CHOICES)}")
    log_lines = run["log_lines"]
    if not isinstance(log_lines, int) or not 0 <= log_lines <= 10_000:
        raise InputError("log_lines", log_lines, "an integer from 0 to 10000")
    progress_interval = run["progress_interval"]
    if not 0 <= progress_interval <= 3600:
        raise InputError("progress_interval", progress_interval, "seconds from 0 (do not follow progress) to 3600")
    stall_timeout, on_stall = run["stall_timeout"], run["on_stall"]
    if not 0 <= stall_timeout <= 7 * 86400:
        raise InputError("stall_timeout", stall_timeout, "seconds from 0 (no stall detection) to 604800 (a week)")
    if on_stall not in ON_STALL_CHOICES:
        raise InputError("on_stall", on_stall, f"one of {', '.join(ON_STALL_CHOICES)}")
    if backend == "local" and not run["wait"]:
        raise InputError("wait", run["wait"], "only with the cluster backend: the local backend's tasks run in this "
                                              "process and end with it")
    if backend == "local" and on_cancel == "keep":
        raise InputError("on_cancel", on_cancel, "delete or abort with the local backend: its tasks end with this "
                                                 "process, so a cancelled step cannot keep them running")
    if backend == "local" and arguments["deadline"] is not None:
        # The local backend's processes have no kubelet to enforce a pod deadline.
        raise InputError("deadline", arguments["deadline"], "only with the cluster backend")
    if backend == "local" and render is render_tf and arguments["code_url"] is None and arguments["code_path"] is None:
        # No image here to hold the entry point: without code the job was created, then failed at its start.
        raise InputError("code_url", None, f"with the local backend, the code holding {arguments['entry']}: code_url "
                                           "(an http(s) URL) or code_path (a directory on this machine)")
    arguments["run_id"] = run_id_or_new(arguments.get("run_id"))
    if not run["wait"] and arguments.get("owner"):
        # A job submitted to outlive this step must not die with its owner: a pipeline run's
        # Workflow is deleted by its TTL (KFP: a day; Argo: the ttlStrategy) or by hand while the
        # job may still train. The job's own ttl removes it once it has finished.
        log.warning("owner %s not set on the job: the step does not wait, so the job must outlive the run "
                    "(its ttl removes it after it finishes)", arguments["owner"])
        arguments["owner"] = None
    # A namespace named by the caller is checked with the job; the context's is looked up
    # only when the job is really sent.
    # Every task learns the stall timeout (its heartbeats and the coordinator's scan follow it).
    manifest = with_stall_timeout(render(name, namespace=namespace or "default", **arguments), stall_timeout)
    if run["dry_run"] and namespace is None and backend == "cluster":  # where the real one would go
        manifest = with_stall_timeout(render(name, namespace=target_namespace(run["connection"]), **arguments),
                                      stall_timeout)
    if run["dry_run"]:
        meta = manifest["metadata"]
        return TrainResult(name=meta["name"], namespace=meta["namespace"], run_id=arguments["run_id"], phase="DryRun",
                           succeeded=True, backend=backend, message="dry run: nothing was created", manifest=manifest)
    target = _backend(backend, run["connection"], run["local_dir"], run["local_data_dir"], run["local_log_dir"],
                      progress or Progress())
    if backend == "cluster":
        target.submit_timeout = timeout  # type: ignore[attr-defined]  # --timeout covers submission too
    if namespace is None and backend == "cluster":  # the context's namespace, read now
        from volcano_pipelines.backends.cluster import ClusterBackend

        assert isinstance(target, ClusterBackend)
        manifest = with_stall_timeout(render(name, namespace=target.cluster.namespace, **arguments), stall_timeout)
    from volcano_pipelines.steps._waiting import WaitPolicy, run as run_job  # not needed to render

    from volcano_pipelines.steps._follow import FollowPolicy

    follow = FollowPolicy.every(progress_interval, stall_timeout)
    policy = WaitPolicy(timeout_seconds=timeout, on_cancel=on_cancel, on_pod_deleted=on_pod_deleted, wait=run["wait"],
                        log_lines=log_lines, follow=follow, on_stall=on_stall)
    with train_spec.named_by_params():  # what the cluster refuses (a missing queue) names the argument too
        return run_job(target, manifest, policy, progress)


def target_namespace(connection: Connection = Connection()) -> str:
    """The namespace a job given none is sent to (what a dry run and `vpipe render` show): the
    connection's context's, the pod's own inside a cluster, else `default`; read without
    connecting, as the submission reads it (without loading the Kubernetes client). A named
    configuration file that does not exist, or a named context it lacks, is refused as the
    submission would refuse it."""
    connection.check()
    return connection.default_namespace()


def _record_places(local_dir: str | None, local_log_dir: str | None) -> list[Path]:
    """Where `status` looks for a saved record, in order: the local backend's directory that
    local_dir / local_log_dir name, alone; else the cluster jobs' records, then the local
    backend's under ./vpipe-local (where `vpipe train --backend local` keeps them by default).
    The local backend saves a record under <log_dir>/post-mortem, its log_dir being
    local_log_dir, else <local_dir>/logs (backends/local.py)."""
    from volcano_pipelines.postmortem.save import default_directory

    if local_dir is None and local_log_dir is None:
        return [default_directory(), Path(LOCAL_DIR, "logs", "post-mortem").absolute()]
    logs = Path(local_log_dir) if local_log_dir is not None else Path(local_dir or LOCAL_DIR, "logs")
    return [(logs / "post-mortem").absolute()]


def _saved_record(name: str, namespace: str | None, connection: Connection, places: list[Path]) -> TrainResult:
    """Job `name` as its saved post-mortem record tells it: the first of `places` that holds
    it. Without a record, phase NotFound with a message that tells a wrong namespace (the job
    has records in another) from a wrong name (no job of that name has one)."""
    from volcano_pipelines.postmortem.save import namespaces_with_record, record_paths
    from volcano_pipelines.steps._restarts import saved_result

    found = sorted({ns for place in places for ns in namespaces_with_record(name, place)})
    if namespace is None:
        if len(found) > 1:
            raise InputError("namespace", None, f"one of {', '.join(found)}: job {name} has a post-mortem record "
                                                "in each of these namespaces (give -n)")
        # The one namespace holding a record needs no connection; with none, where a job would go.
        namespace = found[0] if found else target_namespace(connection)
    for place in places:
        if record_paths(namespace, name, place)[0].is_file():
            return saved_result(namespace, name, place)
    looked = " nor ".join(str(record_paths(namespace, name, place)[0]) for place in places)
    if found:
        why = f"job {name} has a record in namespace {', '.join(found)} (-n {found[0]})"
    else:
        jobs = sorted({p.stem for place in places for p in record_paths(namespace, name, place)[0].parent.glob("*.json")})
        shown = ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")
        why = (f"no job named {name} has one ({f'records in namespace {namespace}: {shown}' if jobs else f'namespace {namespace} has no records'}"
               "); a local-backend job run elsewhere: --local-dir DIR or --local-log-dir DIR; a cluster job's "
               "records: $VPIPE_POST_MORTEM_DIR")
    return TrainResult(name=name, namespace=namespace, run_id=None, phase="NotFound", succeeded=False,
                       message=f"no post-mortem record of job {namespace}/{name} ({looked} exists): {why}")


def _cluster_backend(connection: Connection) -> ClusterBackend:
    from volcano_pipelines.backends.cluster import ClusterBackend

    return ClusterBackend(connection.connect())


def _backend(name: str, connection: Connection, local_dir: str | None, local_data_dir: str | None,
             local_log_dir: str | None, progress: Progress) -> Backend:
    if name == "local":
        from volcano_pipelines.backends.local import LocalBackend

        # Pod output goes where the step's progress puts it (stderr by default, so that --json
        # stays alone on stdout; above a live display; nowhere with -q).
        return LocalBackend(local_dir if local_dir is not None else os.path.join(os.getcwd(), LOCAL_DIR),
                            local_data_dir, local_log_dir, output=progress.output)
    return _cluster_backend(connection)
