"""Step parameters -> argparse flags. The flag set and every help text are derived from the
step's signature and docstring (steps/params.py); this module only says how a parameter is
spelled on a command line. Translation only: no decisions about values."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.errors import InputError
from volcano_pipelines.steps.params import Param, choices, container, item_hint, params, scalar_type, strip_none

__all__ = ["FlagSpec", "add_step_flags", "flag_for", "scalar_flag_type", "step_kwargs"]


@dataclass(frozen=True)
class FlagSpec:
    """How one parameter is spelled. kind: value | bool | negated | list | pairs | task_pairs |
    task_value | positional | skip."""

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
}
# The same parameters on a step with one kind of pod (tensorboard): no TASK: prefix.
FLAT_SPELLING: dict[str, FlagSpec] = {
    "node_selector": FlagSpec("pairs", ("--node-selector",), "KEY=VALUE"),
    "tolerations": FlagSpec("list", ("--toleration",), "KEY[=VALUE]:EFFECT"),
}
RUN_PARAMS = frozenset({"backend", "kubeconfig", "context", "timeout", "on_cancel", "dry_run", "log_lines", "local_dir",
                        "local_data_dir", "local_log_dir"})
# Per-task flags users know from the old launchers: --cpu-per-worker is --worker-cpu.
WORKER_ALIASES = {"cpu": "--cpu-per-worker", "memory": "--memory-per-worker", "gpus": "--gpus-per-worker"}


def scalar_flag_type(hint: Any) -> Callable[[str], Any]:
    """What argparse turns the flag's text into: int and float as such, anything else a string."""
    kind = scalar_type(hint)
    return kind if kind in (int, float) else str


def _per_task(hint: Any) -> bool:
    """Mapping[str, Mapping[...]] or Mapping[str, Sequence[...]]: one entry per task name."""
    return container(hint) == "dict" and container(item_hint(hint)) is not None


def _spec(param: Param) -> FlagSpec:
    if param.name in FLAT_SPELLING and not _per_task(param.hint):
        return FLAT_SPELLING[param.name]
    if param.name in SPELLING:
        return SPELLING[param.name]
    group = "run" if param.name in RUN_PARAMS else "job"
    flag = "--" + param.name.replace("_", "-")
    if strip_none(param.hint) is bool:
        return FlagSpec("bool" if not param.default else "negated", (flag if not param.default else f"--no-{flag[2:]}",),
                        group=group)
    if container(param.hint) == "list":
        return FlagSpec("list", (flag,), group=group)
    return FlagSpec("value", (flag,), group=group)


def add_step_flags(parser: argparse.ArgumentParser, step: Callable[..., Any], tasks: Sequence[str],
                   skip: Iterable[str] = ()) -> None:
    """One flag (or one per task) for each parameter of `step`, with the docstring's help."""
    groups: dict[str, argparse._ArgumentGroup] = {}

    def group(name: str) -> argparse._ArgumentGroup:
        if name not in groups:
            title = f"{name} ({', '.join(tasks)}; TASK: left out means every task)" if name == "per task" else name
            groups[name] = parser.add_argument_group(title)
        return groups[name]

    skipped = set(skip)
    for param in params(step):
        if param.name in skipped:
            continue
        spec = _spec(param)
        shown = not param.required and param.default is not None and not isinstance(param.default, bool) and param.default != ""
        default_text = f" (default {param.default})" if shown else ""
        text = param.help + default_text
        dest = param.name
        if spec.kind == "positional":
            continue  # after `--`: see cli.__init__
        if spec.kind == "value":
            group(spec.group).add_argument(*spec.flags, dest=dest, type=scalar_flag_type(param.hint), metavar=spec.metavar,
                                           default=param.default, required=param.required,
                                           choices=choices(param.hint), help=text)
        elif spec.kind == "bool":
            group(spec.group).add_argument(*spec.flags, dest=dest, action="store_true", help=text)
        elif spec.kind == "negated":
            group(spec.group).add_argument(*spec.flags, dest=dest, action="store_false", help=f"turn off: {param.help}")
        elif spec.kind in ("list", "pairs", "task_pairs", "task_list"):
            group(spec.group).add_argument(*spec.flags, dest=dest, action="append", default=None, metavar=spec.metavar,
                                           help=text + " (repeatable)")
        elif spec.kind == "task_value":
            value_type = scalar_flag_type(item_hint(param.hint))
            for task in tasks:
                flags = [f"--{task}-{spec.flags[0]}"]
                if task in ("worker", "mpiworker") and param.name in WORKER_ALIASES:
                    flags.append(WORKER_ALIASES[param.name])
                group(f"{task}").add_argument(*flags, dest=f"{param.name}:{task}", type=value_type, metavar=spec.metavar,
                                              help=f"{param.help} ({task})")


def flag_for(step: Callable[..., Any], field: str, tasks: Sequence[str]) -> str | None:
    """The flag a user typed for a step argument named in an error: 'cpu[worker]' ->
    '--worker-cpu', 'env[worker]...' -> '--env', 'args[0]' -> 'arguments after --'."""
    name, _, rest = field.partition("[")
    known = {p.name: p for p in params(step)}
    if name not in known:
        return None
    spec = _spec(known[name])
    if spec.kind == "positional":
        return "arguments after --"
    if spec.kind == "task_value":
        task = rest.split("]", 1)[0]
        return f"--{task}-{spec.flags[0]}" if task in tasks else f"--<task>-{spec.flags[0]}"
    return spec.flags[-1]


def _key_value(flag: str, raw: str) -> tuple[str, str]:
    key, sep, value = raw.partition("=")
    if not sep or not key:
        raise InputError(flag, raw, "KEY=VALUE")
    return key, value


def _task_prefix(flag: str, raw: str, tasks: Sequence[str], *, pairs: bool) -> tuple[str, str]:
    """'[TASK:]REST' -> (task or '', REST). A word before ':' that is not a task is an error
    where it cannot be part of REST."""
    head, sep, rest = raw.partition(":")
    if sep and head in tasks:
        return head, rest
    if sep and head and (not pairs or "=" not in head):
        # KEY:... for pairs, or a toleration whose first part is neither a task nor a key=value.
        if pairs or rest.count(":") >= 1:
            raise InputError(flag, raw, f"[TASK:]... where TASK is one of {', '.join(tasks)}")
    return "", raw


def step_kwargs(args: argparse.Namespace, step: Callable[..., Any], tasks: Sequence[str],
                extra: Sequence[str]) -> dict[str, Any]:
    """The parsed flags as the step's keyword arguments."""
    out: dict[str, Any] = {}
    values = vars(args)
    for param in params(step):
        spec = _spec(param)
        flag = spec.flags[-1] if spec.flags else ""
        if spec.kind == "positional":
            out[param.name] = list(extra)
        elif spec.kind == "task_value":
            given = {task: values[f"{param.name}:{task}"] for task in tasks if values.get(f"{param.name}:{task}") is not None}
            if given:
                out[param.name] = given
        elif spec.kind == "pairs":
            raw = values.get(param.name) or []
            out[param.name] = dict(_key_value(flag, item) for item in raw) if raw else None
        elif spec.kind == "task_pairs":
            by_task: dict[str, dict[str, str]] = {}
            for item in values.get(param.name) or []:
                task, rest = _task_prefix(flag, item, tasks, pairs=True)
                key, value = _key_value(flag, rest)
                by_task.setdefault(task, {})[key] = value
            out[param.name] = by_task or None
        elif spec.kind == "task_list":
            lists: dict[str, list[str]] = {}
            for item in values.get(param.name) or []:
                task, rest = _task_prefix(flag, item, tasks, pairs=False)
                lists.setdefault(task, []).append(rest)
            out[param.name] = lists or None
        elif param.name in values:
            out[param.name] = values[param.name]
    return out


def names(items: Iterable[Param]) -> list[str]:
    return [p.name for p in items]
