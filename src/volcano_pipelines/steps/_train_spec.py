"""Flat step arguments -> the typed job specs the builders take, and spec paths back to the
argument names users gave (so an error names `cpu[worker]`, not `worker.resources.cpu`).
Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from volcano_pipelines.errors import InputError
from volcano_pipelines.volcano.spec import (
    MPI_TASKS,
    TF_TASKS,
    CodeSource,
    JobOptions,
    MPIJobSpec,
    Resources,
    Role,
    Storage,
    TFJobSpec,
)
from volcano_pipelines.kube.validate import parse_tolerations

__all__ = ["ALL_TASKS", "MPI_MASTER_RESOURCES", "MPI_TASKS", "TF_TASKS", "mpi_spec", "named_by_params", "param_for", "roles", "tf_spec"]

MPI_MASTER_RESOURCES = Resources(cpu="500m", memory="512Mi")

ALL_TASKS = ""  # the key of a per-task dict that applies to every task
V = TypeVar("V")

PerTask = Mapping[str, V]


def _per_task(param: str, values: PerTask[V] | None, tasks: Sequence[str]) -> dict[str, V]:
    values = dict(values or {})
    for key in values:
        if key != ALL_TASKS and key not in tasks:
            raise InputError(param, key, f"a task name ({', '.join(tasks)}) or '' for every task")
    return values


def _merged(param: str, values: PerTask[Mapping[str, str]] | None, tasks: Sequence[str]) -> dict[str, dict[str, str]]:
    """Per task: the every-task entries, overridden by the task's own."""
    checked = _per_task(param, values, tasks)
    for key, value in checked.items():
        if not isinstance(value, Mapping):
            raise InputError(f"{param}[{key}]", value, "a mapping of names to string values")
    every = dict(checked.get(ALL_TASKS) or {})
    return {task: {**every, **dict(checked.get(task) or {})} for task in tasks}


def roles(
    replicas: Mapping[str, int],
    tasks: Sequence[str],
    *,
    task_images: PerTask[str] | None,
    cpu: PerTask[str] | None,
    memory: PerTask[str] | None,
    gpus: PerTask[int] | None,
    env: PerTask[Mapping[str, str]] | None,
    pod_labels: PerTask[Mapping[str, str]] | None,
    pod_annotations: PerTask[Mapping[str, str]] | None,
    node_selector: PerTask[Mapping[str, str]] | None,
    tolerations: PerTask[Sequence[str]] | None,
    default_resources: Mapping[str, Resources] | None = None,
) -> dict[str, Role]:
    """One Role per task present in `replicas`, from the per-task dicts."""
    images = _per_task("task_images", task_images, tasks)
    cpus = _per_task("cpu", cpu, tasks)
    memories = _per_task("memory", memory, tasks)
    gpu_counts = _per_task("gpus", gpus, tasks)
    envs = _merged("env", env, tasks)
    labels = _merged("pod_labels", pod_labels, tasks)
    annotations = _merged("pod_annotations", pod_annotations, tasks)
    selectors = _merged("node_selector", node_selector, tasks)
    raw_tolerations = _per_task("tolerations", tolerations, tasks)
    parsed: dict[str, list[dict[str, Any]]] = {}
    for key, items in raw_tolerations.items():
        parsed[key] = parse_tolerations(f"tolerations[{key}]", items)
    built: dict[str, Role] = {}
    for task, count in replicas.items():
        base = (default_resources or {}).get(task, Resources())
        built[task] = Role(
            replicas=count,
            image=images.get(task, images.get(ALL_TASKS)),
            resources=Resources(
                cpu=cpus.get(task, cpus.get(ALL_TASKS, base.cpu)),
                memory=memories.get(task, memories.get(ALL_TASKS, base.memory)),
                gpu=gpu_counts.get(task, gpu_counts.get(ALL_TASKS, base.gpu)),
            ),
            env=envs[task],
            labels=labels[task],
            annotations=annotations[task],
            node_selector=selectors[task],
            tolerations=tuple(parsed.get(ALL_TASKS, []) + parsed.get(task, [])),
        )
    return built


def job_options(
    *,
    name: str,
    namespace: str,
    image: str | None,
    queue: str,
    priority_class: str | None,
    min_available: int | None,
    max_retry: int,
    ttl: int | None,
    restart_on_failure: bool,
    image_pull_secrets: Sequence[str] | None,
    service_account: str | None,
    run_id: str | None,
    labels: Mapping[str, str] | None,
) -> JobOptions:
    return JobOptions(
        name=name,
        namespace=namespace,
        image=image,
        queue=queue,
        priority_class=priority_class,
        min_available=min_available,
        max_retry=max_retry,
        ttl_seconds_after_finished=ttl,
        image_pull_secrets=tuple(image_pull_secrets or ()),
        service_account=service_account,
        run_id=run_id,
        labels=dict(labels or {}),
        restart_on_pod_failure=restart_on_failure,
    )


def code_source(url: str | None, sha256: str | None, path: str | None, pvc: str | None, entry: str) -> CodeSource:
    return CodeSource(url=url, sha256=sha256, path=path, pvc=pvc, entry=entry)


def storage(data_pvc: str | None, data_dir: str, log_pvc: str | None, log_dir: str) -> Storage:
    return Storage(data_pvc=data_pvc, data_dir=data_dir, log_pvc=log_pvc, log_dir=log_dir)


# Spec paths (what validation names) -> the step's own arguments.
_SPEC_PARAMS = {
    "job.name": "name", "job.namespace": "namespace", "job.image": "image", "job.queue": "queue",
    "job.priority_class": "priority_class", "job.min_available": "min_available", "job.max_retry": "max_retry",
    "job.ttl_seconds_after_finished": "ttl", "job.image_pull_secrets": "image_pull_secrets",
    "job.service_account": "service_account", "job.run_id": "run_id", "job.labels": "labels",
    "code.url": "code_url", "code.sha256": "code_sha256", "code.path": "code_path", "code.pvc": "code_pvc",
    "code.entry": "entry", "storage.data_pvc": "data_pvc", "storage.data_dir": "data_dir",
    "storage.log_pvc": "log_pvc", "storage.log_dir": "log_dir", "ps.replicas": "ps", "worker.replicas": "workers",
    "mpiworker.replicas": "workers", "slots_per_worker": "slots_per_worker", "port": "port", "command": "command",
    "mpiexec_args": "mpiexec_args", "args": "args",
}
_ROLE_PARAMS = {
    "resources.cpu": "cpu", "resources.memory": "memory", "resources.gpu": "gpus", "image": "task_images",
    "env": "env", "labels": "pod_labels", "annotations": "pod_annotations", "node_selector": "node_selector",
    "tolerations": "tolerations",
}


def param_for(field: str) -> str:
    """The step argument behind a spec path: 'worker.resources.cpu' -> 'cpu[worker]',
    "job.labels['a']" -> "labels['a']"; unknown paths come back unchanged."""
    cut = min((i for i in (field.find("["), field.find(" ")) if i >= 0), default=len(field))
    base, suffix = field[:cut], field[cut:]
    if base in _SPEC_PARAMS:
        return _SPEC_PARAMS[base] + suffix
    task, _, attribute = base.partition(".")
    if task in TF_TASKS + MPI_TASKS and attribute in _ROLE_PARAMS:
        return f"{_ROLE_PARAMS[attribute]}[{task}]" + suffix
    return field


@contextmanager
def named_by_params() -> Iterator[None]:
    """Errors raised inside name the step's argument (cpu[worker]), not the spec path
    (worker.resources.cpu)."""
    try:
        yield
    except InputError as err:
        param = param_for(err.field)
        if param == err.field:
            raise
        raise InputError(param, err.value, err.allowed) from None


def tf_spec(
    *, name: str, namespace: str, image: str | None, ps: int, workers: int, chief: bool, evaluator: bool, port: int,
    args: Sequence[str] | None, code_url: str | None, code_sha256: str | None, code_path: str | None,
    code_pvc: str | None, entry: str, data_pvc: str | None, data_dir: str, log_pvc: str | None, log_dir: str,
    task_images: Any, cpu: Any, memory: Any, gpus: Any, env: Any, pod_labels: Any, pod_annotations: Any,
    node_selector: Any, tolerations: Any, **job: Any,
) -> TFJobSpec:
    replicas = {"ps": ps, "worker": workers}
    if chief:
        replicas["chief"] = 1
    if evaluator:
        replicas["evaluator"] = 1
    _check_replica_types(replicas)
    built = roles(
        replicas, TF_TASKS, task_images=task_images, cpu=cpu, memory=memory, gpus=gpus, env=env,
        pod_labels=pod_labels, pod_annotations=pod_annotations, node_selector=node_selector, tolerations=tolerations,
    )
    return TFJobSpec(
        job=job_options(name=name, namespace=namespace, image=image, **job),
        code=code_source(code_url, code_sha256, code_path, code_pvc, entry),
        storage=storage(data_pvc, data_dir, log_pvc, log_dir),
        ps=built["ps"], worker=built["worker"], chief=built.get("chief"), evaluator=built.get("evaluator"),
        args=tuple(args or ()), port=port,
    )


def mpi_spec(
    *, name: str, command: Sequence[str], namespace: str, image: str | None, workers: int, slots_per_worker: int,
    mpiexec_args: Sequence[str] | None, code_url: str | None, code_sha256: str | None, code_path: str | None,
    code_pvc: str | None, entry: str, data_pvc: str | None, data_dir: str, log_pvc: str | None, log_dir: str,
    task_images: Any, cpu: Any, memory: Any, gpus: Any, env: Any, pod_labels: Any, pod_annotations: Any,
    node_selector: Any, tolerations: Any, **job: Any,
) -> MPIJobSpec:
    replicas = {"mpimaster": 1, "mpiworker": workers}
    _check_replica_types(replicas)
    built = roles(
        replicas, MPI_TASKS, task_images=task_images, cpu=cpu, memory=memory, gpus=gpus, env=env,
        pod_labels=pod_labels, pod_annotations=pod_annotations, node_selector=node_selector, tolerations=tolerations,
        default_resources={"mpimaster": MPI_MASTER_RESOURCES},
    )
    if isinstance(command, str):
        raise InputError("command", command, "a list: the program and its arguments")
    return MPIJobSpec(
        job=job_options(name=name, namespace=namespace, image=image, **job),
        command=tuple(command),
        code=code_source(code_url, code_sha256, code_path, code_pvc, entry),
        storage=storage(data_pvc, data_dir, log_pvc, log_dir),
        master=built["mpimaster"], worker=built["mpiworker"], slots_per_worker=slots_per_worker,
        mpiexec_args=tuple(mpiexec_args or ()),
    )


def _check_replica_types(replicas: Mapping[str, int]) -> None:
    # Before any list of that length is built: a huge count must not eat memory first.
    for task, count in replicas.items():
        if not isinstance(count, int) or isinstance(count, bool):
            raise InputError(f"{task}.replicas", count, "an integer")
