"""A step's Argo parameters and the command line they become, derived from the step's one
signature (interface/params.py: names, types, defaults, help), its registry entry (steps/registry.py:
the `vpipe` words, positional arguments, task names) and how `vpipe` spells each parameter
(interface/spelling.py, which the CLI builds its flags from too). Nothing here lists parameters,
and nothing reads the CLI's parser: a new step argument becomes an Argo parameter on the next
compile.

How a parameter reaches the command line is encoded as a SPEC word that the container's
program (`python3 -m volcano_pipelines.argo.run`, argo/run.py) reads in pairs `SPEC VALUE`:

    .        VALUE is one word (command words, positionals such as sync's SRC and DST)
    _        VALUE is one word, left out when empty (an optional positional such as reap's JOB)
    --flag   `--flag VALUE`, left out when VALUE is empty (an optional argument not given)
    ?--flag  `--flag` when VALUE is true (a switch); VALUE must be true or false
    !--flag  `--flag` when VALUE is false (a negated switch such as --no-restart-on-failure)
    #--flag  `--flag VALUE` where VALUE is whole seconds (digits only; a train step's timeout,
             from which Argo's own deadline is computed); anything else is bad input (exit 2)
    *--flag  `--flag LINE` for each non-empty line of VALUE (repeatable flags: --env, --label)
    +        each non-empty line of VALUE as one word (the program arguments after `--`)

Values only ever travel as single argv words: no shell is involved at all.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.argo.outputs import DERIVED
from volcano_pipelines.interface.params import Param, choices, params
from volcano_pipelines.interface.spelling import CONNECTION_PARAMS, LOCAL_BACKEND_PARAMS, FlagSpec, flag_spec, long_flag

__all__ = ["FIXED_BY_POD", "Input", "StepCommand", "output_names", "step_command"]

# Where the step runs is fixed by the workflow pod (in-cluster config, its ServiceAccount),
# not chosen per run: these arguments are left out of every template.
FIXED_BY_POD = CONNECTION_PARAMS | LOCAL_BACKEND_PARAMS
# The run identity is the workflow's: a retried step attaches to the job it created.
RUN_ID = ("run_id", "{{workflow.uid}}")
BOOL_VALUES = ("true", "false")


@dataclass(frozen=True)
class Input:
    name: str  # Argo parameter name: the flag without its dashes
    spec: str  # how argo/run.py turns the value into argv (module docstring)
    default: str | None  # None: required
    description: str
    enum: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StepCommand:
    """The `vpipe` command of one step as Argo parameters."""

    words: tuple[str, ...]  # e.g. ("train", "tf")
    inputs: tuple[Input, ...]
    fixed: tuple[tuple[str, str], ...]  # (flag, value) pairs every run gets, e.g. --run-id {{workflow.uid}}

    def args(self) -> list[str]:
        """The container args: SPEC VALUE pairs, program arguments (`+`) last, after `--`."""
        out: list[str] = []
        for word in self.words:
            out += [".", word]
        trailing: list[str] = []
        for item in self.inputs:
            pair = [item.spec, tag(f"inputs.parameters.{item.name}")]
            if item.spec == "+":
                trailing += pair
            else:
                out += pair
        for flag, value in self.fixed:
            out += [".", flag, ".", value]
        out += [".", "--json"]
        if trailing:
            out += [".", "--", *trailing]
        return out

    def input(self, name: str) -> Input:
        return next(i for i in self.inputs if i.name == name)


def tag(expression: str) -> str:
    """An Argo template tag: `{{expression}}`."""
    return "{{" + expression + "}}"


def _dashes(name: str) -> str:
    return name.replace("_", "-")


def _text(default: Any) -> str:
    if default is None:
        return ""
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, (list, tuple)):
        return "\n".join(str(v) for v in default)
    return str(default)


def _plain(help_text: str) -> str:
    """Help without a Python example (`e.g. {"worker": "4"}`): an Argo parameter is a string."""
    return help_text.split(", e.g. {")[0]


def _lines(help_text: str, metavar: str | None) -> str:
    return f"{_plain(help_text)} (one {metavar or 'value'} per line)".strip()


def _inputs_for(param: Param, spec: FlagSpec, *, positional: bool, tasks: Sequence[str]) -> list[Input]:
    """The Argo parameters of one step parameter, spelled as `vpipe` spells it (interface/spelling.py)."""
    name, help_text = _dashes(param.name), param.help
    default = None if param.required else _text(param.default)
    if positional:  # a word: sync's SRC and DST; optional (None by default): reap's JOB
        return [Input(name, "_" if not param.required and param.default is None else ".", default, help_text)]
    if spec.kind == "positional":  # the program's arguments, after `--`
        return [Input(name, "+", "", f"{help_text} (one per line)".strip())]
    flag = long_flag(spec) if spec.kind != "task_value" else ""
    if spec.kind == "bool":
        return [Input(name, "?" + flag, default or "false", help_text, BOOL_VALUES)]
    if spec.kind == "negated":
        return [Input(name, "!" + flag, default or "true", help_text, BOOL_VALUES)]
    if spec.kind in ("list", "pairs", "task_pairs", "task_list"):
        return [Input(name, "*" + flag, default or "", _lines(help_text, spec.metavar))]
    if spec.kind == "task_value":  # one flag per task: --worker-cpu
        return [Input(f"{task}-{spec.flags[0]}", f"--{task}-{spec.flags[0]}", "", f"{_plain(help_text)} ({task})")
                for task in tasks]
    values = choices(param.hint)
    return [Input(name, flag, default, help_text, tuple(str(v) for v in values) if values else None)]


def step_command(step: Callable[..., Any], words: Sequence[str], *, positional: Sequence[str] = (),
                 tasks: Sequence[str] = (), required: Sequence[str] = (), whole_seconds: Sequence[str] = (),
                 fixed_values: Mapping[str, str] | None = None) -> StepCommand:
    """The Argo parameters of `step` as run by `vpipe <words>` (a registry entry's words,
    positional parameters and task names). `required`: parameters a template must be given
    although the step has a default (e.g. a train step's timeout, which bounds the pod's
    activeDeadlineSeconds); `whole_seconds`: parameters that must be whole seconds (`#` spec);
    `fixed_values`: step parameters the template sets itself (parameter -> value, e.g. the
    namespace: the workflow's), which are then not Argo parameters."""
    inputs: list[Input] = []
    fixed: list[tuple[str, str]] = []
    wired = {RUN_ID[0]: RUN_ID[1], **(fixed_values or {})}
    for param in params(step):
        if param.name in FIXED_BY_POD:
            continue
        spec = flag_spec(param)
        if param.name in wired:
            fixed.append((long_flag(spec), wired[param.name]))
            continue
        for item in _inputs_for(param, spec, positional=param.name in positional, tasks=tasks):
            if item.name in required:
                item = dataclasses.replace(item, default=None)
            if item.name in whole_seconds and item.spec.startswith("--"):
                item = dataclasses.replace(item, spec="#" + item.spec, description=f"{item.description} (whole seconds)")
            inputs.append(item)
    unknown = set(wired) - {param.name for param in params(step)}
    if unknown - {RUN_ID[0]}:
        raise ValueError(f"fixed values for parameters {sorted(unknown)} that {'/'.join(words)} does not have")
    return StepCommand(tuple(words), tuple(inputs), tuple(fixed))


# --- outputs -------------------------------------------------------------------------------

_SCALARS = (str, int, float, bool, type(None))


def _arms(hint: Any) -> tuple[Any, ...]:
    """`str | None` -> (str, NoneType); any other hint -> (hint,)."""
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def _is_scalar(hint: Any) -> bool:
    return all(arm in _SCALARS for arm in _arms(hint))


def _zero(hint: Any) -> Any:
    """A placeholder value of a required field's type, to build a sample result."""
    arm = next((a for a in _arms(hint) if a is not type(None)), None)
    return arm() if arm in (str, int, float, bool) else None


def output_names(step: Callable[..., Any]) -> list[str]:
    """The result's scalar fields (phase, succeeded, copied, ...): each becomes an output
    parameter. Read from the step's return type: the dataclass fields, plus what to_dict()
    adds (SyncResult.ok)."""
    result_type = typing.get_type_hints(step)["return"]
    hints = typing.get_type_hints(result_type)
    fields = {f.name for f in dataclasses.fields(result_type)}
    sample = result_type(**{
        f.name: _zero(hints[f.name]) for f in dataclasses.fields(result_type)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    })
    out = []
    for key, value in sample.to_dict().items():
        scalar = _is_scalar(hints[key]) if key in fields else isinstance(value, (str, int, float, bool))
        if scalar:
            out.append(_dashes(key))
    return out + [name for name, source, _ in DERIVED if source in fields]
