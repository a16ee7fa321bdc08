"""How each step parameter is spelled on the `vpipe` command line: the one place both the CLI
(which builds its flags from it) and the Argo templates (whose containers run `vpipe`) read.
A parameter not named here is `--<name-with-dashes> VALUE`, a switch for a bool, a repeatable
flag for a list. Pure: no argparse."""

from __future__ import annotations

from dataclasses import dataclass

from volcano_pipelines.k8s.connection import Connection
from volcano_pipelines.interface.params import Param, container, group_fields, item_hint, strip_none

__all__ = ["CONNECTION_PARAMS", "FLAT_SPELLING", "RUN_PARAMS", "SPELLING", "WORKER_ALIASES", "FlagSpec", "flag_spec", "long_flag",
           "per_task"]


@dataclass(frozen=True)
class FlagSpec:
    """How one parameter is spelled. kind: value | bool | negated | list | pairs | task_pairs |
    task_list | task_value (one flag per task: `--<task>-<flags[0]>`) | positional (the
    program's arguments, after `--`)."""

    kind: str
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    group: str = "job"


# Spellings that differ from the plain `--<param-with-dashes> VALUE`.
SPELLING: dict[str, FlagSpec] = {
    "name": FlagSpec("value", ("--name",)),
    "namespace": FlagSpec("value", ("-n", "--namespace")),
    "restart_on_failure": FlagSpec("negated", ("--no-restart-on-failure",)),
    "wait": FlagSpec("negated", ("--no-wait",), group="run"),
    "image_pull_secrets": FlagSpec("list", ("--image-pull-secret",), "SECRET"),
    "labels": FlagSpec("pairs", ("--label",), "KEY=VALUE"),
    "env": FlagSpec("task_pairs", ("--env",), "[TASK:]NAME=VALUE", "per task"),
    "pod_labels": FlagSpec("task_pairs", ("--pod-label",), "[TASK:]KEY=VALUE", "per task"),
    "pod_annotations": FlagSpec("task_pairs", ("--pod-annotation",), "[TASK:]KEY=VALUE", "per task"),
    "node_selector": FlagSpec("task_pairs", ("--node-selector",), "[TASK:]KEY=VALUE", "per task"),
    "tolerations": FlagSpec("task_list", ("--toleration",), "[TASK:]KEY[=VALUE]:EFFECT", "per task"),
    "task_images": FlagSpec("task_value", ("image",), "IMAGE", "per task"),
    "cpu": FlagSpec("task_value", ("cpu",), "CPU", "per task"),
    "memory": FlagSpec("task_value", ("memory",), "MEMORY", "per task"),
    "gpus": FlagSpec("task_value", ("gpus",), "N", "per task"),
    "args": FlagSpec("positional"),
    "command": FlagSpec("value", ("--command",), "'PROGRAM ARGS'"),
    "mpiexec_args": FlagSpec("list", ("--mpiexec-arg",), "ARG"),
    "include": FlagSpec("list", ("--include",), "GLOB"),
    "exclude": FlagSpec("list", ("--exclude",), "GLOB"),
}
# The same parameters on a step with one kind of pod (tensorboard): no TASK: prefix.
FLAT_SPELLING: dict[str, FlagSpec] = {
    "node_selector": FlagSpec("pairs", ("--node-selector",), "KEY=VALUE"),
    "tolerations": FlagSpec("list", ("--toleration",), "KEY[=VALUE]:EFFECT"),
}
# What only the local backend reads: the pipeline front ends (KFP components, Argo templates)
# always run in a cluster and leave these out of their forms.
LOCAL_BACKEND_PARAMS = frozenset({"backend", "local_dir", "local_data_dir", "local_log_dir"})
# The connection's fields, as the front ends show them (flat).
CONNECTION_PARAMS = frozenset(name for name, _, _, _ in group_fields(Connection))
RUN_PARAMS = CONNECTION_PARAMS | {"backend", "timeout", "on_cancel", "dry_run", "log_lines", "local_dir", "local_data_dir",
                                  "local_log_dir"}
# Per-task flags users know from the old launchers: --cpu-per-worker is --worker-cpu.
WORKER_ALIASES = {"cpu": "--cpu-per-worker", "memory": "--memory-per-worker", "gpus": "--gpus-per-worker"}
_PER_TASK_KINDS = ("task_pairs", "task_list", "task_value")


def per_task(param: Param) -> bool:
    """A setting per task name: Mapping[str, X] for a step with tasks (cpu of train_tf), not
    the plain value of a step with one kind of pod (cpu of tensorboard)."""
    return container(param.hint) == "dict" and (
        container(item_hint(param.hint)) is not None or param.name in SPELLING
        and SPELLING[param.name].kind == "task_value")


def flag_spec(param: Param) -> FlagSpec:
    """How `param` is spelled."""
    spelled = SPELLING.get(param.name)
    if spelled is not None and spelled.kind in _PER_TASK_KINDS and not per_task(param):
        spelled = FLAT_SPELLING.get(param.name)  # one kind of pod: a plain flag (or the generic one)
    if spelled is not None:
        return spelled
    group = "run" if param.name in RUN_PARAMS else "job"
    flag = "--" + param.name.replace("_", "-")
    if strip_none(param.hint) is bool:
        return FlagSpec("bool" if not param.default else "negated", (flag if not param.default else f"--no-{flag[2:]}",),
                        group=group)
    if container(param.hint) == "list":
        return FlagSpec("list", (flag,), group=group)
    return FlagSpec("value", (flag,), group=group)


def long_flag(spec: FlagSpec) -> str:
    """The flag's long spelling (`--namespace`, not `-n`)."""
    return next(flag for flag in spec.flags if flag.startswith("--"))
