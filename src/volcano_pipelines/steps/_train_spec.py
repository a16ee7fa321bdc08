"""Flat step arguments -> the typed job specs the builders take, and spec paths back to the
argument names users gave (so an error names `cpu[worker]`, not `worker.resources.cpu`).
Pure: no I/O."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from volcano_pipelines.errors import InputError
from volcano_pipelines.volcano.spec import (
    MPI_MASTER_RESOURCES,
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
from volcano_pipelines.objects.validate import parse_tolerations
from volcano_pipelines.steps._job_params import Tasks, spec_params
from volcano_pipelines.interface.params import declared

__all__ = ["ALL_TASKS", "MPI_MASTER_RESOURCES", "MPI_TASKS", "TF_TASKS", "mpi_spec", "named_by_params", "param_for", "roles", "tf_spec"]


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


def _filled(prefix: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The spec fields under `prefix` (job., code., storage.) from the arguments that fill
    them, as declared (steps/_job_params.py)."""
    return {field: arguments[name] for field, name in _fields_under(prefix) if name in arguments}


@functools.cache
def _fields_under(prefix: str) -> tuple[tuple[str, str], ...]:
    """(spec field, argument) of the declared spec paths `prefix`FIELD."""
    return tuple((path[len(prefix):], name) for path, name in spec_params().items()
                 if path.startswith(prefix) and path.count(".") == 1 and path != "job.name")


def job_options(arguments: Mapping[str, Any]) -> JobOptions:
    fields = _filled("job.", arguments)
    fields["image_pull_secrets"] = tuple(fields.get("image_pull_secrets") or ())
    fields["labels"] = dict(fields.get("labels") or {})
    return JobOptions(name=arguments["name"], **fields)


def param_for(field: str) -> str:
    """The step argument behind a spec path: 'worker.resources.cpu' -> 'cpu[worker]',
    "job.labels['a']" -> "labels['a']"; unknown paths come back unchanged."""
    cut = min((i for i in (field.find("["), field.find(" ")) if i >= 0), default=len(field))
    base, suffix = field[:cut], field[cut:]
    declared_paths = spec_params()
    if base in declared_paths:
        return declared_paths[base] + suffix
    task, _, attribute = base.partition(".")
    if task in TF_TASKS + MPI_TASKS and f"*.{attribute}" in declared_paths:
        return f"{declared_paths['*.' + attribute]}[{task}]" + suffix
    return field


@contextmanager
def named_by_params() -> Iterator[None]:
    """Errors raised inside name the step's argument (cpu[worker]), not the spec path
    (worker.resources.cpu)."""
    try:
        yield
    except InputError as err:
        param = param_for(err.field)
        # The spec paths in the text too ("either code.url or code.path") are the arguments'.
        allowed = _SPEC_PATH.sub(lambda m: param_for(m.group(0)), err.allowed)
        if param == err.field and allowed == err.allowed:
            raise
        raise InputError(param, err.value, allowed) from None


_SPEC_PATH = re.compile(r"\b[a-z]+\.[a-z_]+(?:\.[a-z_]+)?\b")


def tf_spec(**arguments: Any) -> TFJobSpec:
    """render_tf's arguments (every declared one) -> the TF job spec."""
    replicas = {"ps": arguments["ps"], "worker": arguments["workers"]}
    if arguments["chief"]:
        replicas["chief"] = 1
    if arguments["evaluator"]:
        replicas["evaluator"] = 1
    _check_replica_types(replicas)
    built = roles(replicas, TF_TASKS, **_per_task_arguments(arguments))
    return TFJobSpec(
        job=job_options(arguments),
        code=CodeSource(**_filled("code.", arguments)),
        storage=Storage(**_filled("storage.", arguments)),
        ps=built["ps"], worker=built["worker"], chief=built.get("chief"), evaluator=built.get("evaluator"),
        args=tuple(arguments["args"] or ()), port=arguments["port"],
    )


def mpi_spec(**arguments: Any) -> MPIJobSpec:
    """render_mpi's arguments (every declared one) -> the MPI job spec."""
    replicas = {"mpimaster": 1, "mpiworker": arguments["workers"]}
    _check_replica_types(replicas)
    built = roles(replicas, MPI_TASKS, **_per_task_arguments(arguments),
                  default_resources={"mpimaster": MPI_MASTER_RESOURCES})
    command = arguments["command"]
    if isinstance(command, str):
        raise InputError("command", command, "a list: the program and its arguments")
    return MPIJobSpec(
        job=job_options(arguments),
        command=tuple(command),
        code=CodeSource(**_filled("code.", arguments)),
        storage=Storage(**_filled("storage.", arguments)),
        master=built["mpimaster"], worker=built["mpiworker"], slots_per_worker=arguments["slots_per_worker"],
        mpiexec_args=tuple(arguments["mpiexec_args"] or ()),
    )


def _per_task_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {name: arguments[name] for name, _, _, _ in declared(Tasks)}


def _check_replica_types(replicas: Mapping[str, int]) -> None:
    # Before any list of that length is built: a huge count must not eat memory first.
    for task, count in replicas.items():
        if not isinstance(count, int) or isinstance(count, bool):
            raise InputError(f"{task}.replicas", count, "an integer")
