"""Step parameters -> argparse flags. The flag set and every help text are derived from the
step's signature and docstring (interface/params.py), each flag's spelling from interface/spelling.py
(which the Argo templates read too). Translation only: no decisions about values."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from volcano_pipelines.errors import InputError
from volcano_pipelines.interface.params import Param, choices, grouped, item_hint, params, scalar_type
from volcano_pipelines.interface.spelling import WORKER_ALIASES, FlagSpec, flag_spec

__all__ = ["FlagSpec", "add_step_flags", "flag_error", "flag_for", "scalar_flag_type", "step_kwargs", "typed_flag"]

# Where the parsed arguments record which spelling of a flag with an alias was typed.
_TYPED = "_typed_flags"


class _StoreTyped(argparse.Action):
    """Store the value and which of the flag's spellings was typed (`--cpu-per-worker` for
    `--worker-cpu`): an error about the value names the flag the user wrote."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        typed = dict(getattr(namespace, _TYPED, None) or {})
        typed[self.option_strings[0]] = option_string or self.option_strings[0]
        setattr(namespace, _TYPED, typed)


def typed_flag(args: argparse.Namespace, flag: str) -> str:
    """`flag` as the user spelled it: its alias when the alias was typed."""
    typed: dict[str, str] = getattr(args, _TYPED, None) or {}
    return typed.get(flag, flag)


def scalar_flag_type(hint: Any) -> Callable[[str], Any]:
    """What argparse turns the flag's text into: int and float as such, anything else a string."""
    kind = scalar_type(hint)
    return kind if kind in (int, float) else str


def add_step_flags(parser: argparse.ArgumentParser, step: Callable[..., Any], tasks: Sequence[str],
                   skip: Iterable[str] = (), titles: Mapping[str, str] | None = None) -> None:
    """One flag (or one per task) for each parameter of `step`, with the docstring's help.
    `titles`: a heading of the command's own for a group (sync's job flags are its copy pods')."""
    groups: dict[str, argparse._ArgumentGroup] = {}

    def group(name: str) -> argparse._ArgumentGroup:
        if name not in groups:
            title = f"{name} ({', '.join(tasks)}; TASK: left out means every task)" if name == "per task" else name
            groups[name] = parser.add_argument_group((titles or {}).get(name, title))
        return groups[name]

    skipped = set(skip)
    for param in params(step):
        if param.name in skipped:
            continue
        spec = flag_spec(param)
        shown = not param.required and param.default is not None and not isinstance(param.default, bool) and param.default != ""
        default_text = f" (default {param.default})" if shown else ""
        text = in_flags(step, param.help, tasks) + default_text
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
            group(spec.group).add_argument(*spec.flags, dest=dest, action="store_false",
                                           help=in_flags(step, negated_help(param.help), tasks))
        elif spec.kind in ("list", "pairs", "task_pairs", "task_list"):
            group(spec.group).add_argument(*spec.flags, dest=dest, action="append", default=None, metavar=spec.metavar,
                                           help=cli_help(text) + " (repeatable)")
        elif spec.kind == "task_value":
            value_type = scalar_flag_type(item_hint(param.hint))
            for task in tasks:
                flags = [f"--{task}-{spec.flags[0]}"]
                if task in ("worker", "mpiworker") and param.name in WORKER_ALIASES:
                    flags.append(WORKER_ALIASES[param.name])
                group(f"{task}").add_argument(*flags, dest=f"{param.name}:{task}", type=value_type, metavar=spec.metavar,
                                              action=_StoreTyped, help=f"{cli_help(param.help)} ({task})")


# The Python API's examples of per-task settings ({"worker": "4"}) and its "" key: on the command
# line the task is in the flag (--worker-cpu 4) or a TASK: prefix (--env worker:B=2).
_DICT_EXAMPLE = re.compile(r",? e\.g\. \{.*\}")
_EVERY_TASK_KEY = re.compile(r" \(''? for every task\)")


def cli_help(text: str) -> str:
    """A per-task parameter's help as the command line reads: no dict examples."""
    return _EVERY_TASK_KEY.sub("", _DICT_EXAMPLE.sub("", text))


def negated_help(text: str) -> str:
    """The help of a `--no-X` switch: what it does ("wait ... (false: submit and return)" ->
    "submit and return, do not wait ..."), not "turn off: <what the default does>"."""
    cut = text.find("false: ")
    if cut < 0:
        return f"turn off: {text}"
    on, off = text[:cut].rstrip(), text[cut + len("false: "):].strip()
    if on.endswith("(") and off.endswith(")"):  # "... (false: X)": the parenthesis was the note's
        off = off[:-1]
    return f"{off} (default: {on.rstrip(' ;(')})"


_ARGUMENT_NAME = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?:\[[a-z]+\])?")
# A one-word argument name is marked by the step with backquotes (`ttl`): "job" alone is a word.
_QUOTED_NAME = re.compile(r"`([a-z][a-z0-9_]*)`")


def in_flags(step: Callable[..., Any], text: str, tasks: Sequence[str]) -> str:
    """An error's text with the step's argument names (`delete_deployment`, `code_url`,
    `cpu[worker]`, a quoted `ttl`) written as the flags a user types; plain words are left alone."""
    text = _QUOTED_NAME.sub(lambda m: flag_for(step, m.group(1), tasks) or m.group(0), text)
    return _ARGUMENT_NAME.sub(lambda m: flag_for(step, m.group(0), tasks) or m.group(0), text)


def flag_for(step: Callable[..., Any], field: str, tasks: Sequence[str]) -> str | None:
    """The flag a user typed for a step argument named in an error: 'cpu[worker]' ->
    '--worker-cpu', 'env[worker]...' -> '--env', 'args[0]' -> 'arguments after --'."""
    name, _, rest = field.partition("[")
    known = {p.name: p for p in params(step)}
    if name not in known:
        return None
    spec = flag_spec(known[name])
    if spec.kind == "positional":
        return "arguments after --"
    if spec.kind == "task_value":
        task = rest.split("]", 1)[0]
        return f"--{task}-{spec.flags[0]}" if task in tasks else f"--<task>-{spec.flags[0]}"
    return spec.flags[-1]


def flag_error(step: Callable[..., Any], err: InputError, tasks: Sequence[str],
               args: argparse.Namespace | None = None) -> InputError | None:
    """A step's error as the command line reads it: the flag for the argument it names (the
    alias typed, when `args` records one), a switch named alone (`invalid --no-wait`, not
    `--no-wait=False`: the user typed no value), the allowed text in flags. None when the
    argument has no flag."""
    flag = flag_for(step, err.field, tuple(tasks))
    if flag is None:
        return None
    known = {p.name: p for p in params(step)}
    param = known.get(err.field.partition("[")[0])
    switch = param is not None and flag_spec(param).kind in ("bool", "negated") and err.value is not None
    return InputError(typed_flag(args, flag) if args is not None else flag, True if switch else err.value,
                      in_flags(step, err.allowed, tuple(tasks)))


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
    """The parsed flags as the step's keyword arguments (a group's flags gathered into the group)."""
    out: dict[str, Any] = {}
    values = vars(args)
    for param in params(step):
        spec = flag_spec(param)
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
    return grouped(step, out)


def names(items: Iterable[Param]) -> list[str]:
    return [p.name for p in items]
