"""A step's Argo parameters and the command line they become, derived from the step's one
signature (steps/params.py: names, defaults, help) and from how `vpipe` spells each of them
(the CLI parser, itself derived from the same signature). Nothing here lists parameters: a
new step argument with a CLI flag becomes an Argo parameter on the next compile.

How a parameter reaches the command line is encoded as a SPEC word that the container's
constant run script (`RUN_SCRIPT`) reads in pairs `SPEC VALUE`:

    .        VALUE is one word (command words, positionals such as sync's SRC and DST)
    _        VALUE is one word, left out when empty (an optional positional such as reap's JOB)
    --flag   `--flag VALUE`, left out when VALUE is empty (an optional argument not given)
    ?--flag  `--flag` when VALUE is true (a switch); VALUE must be true or false
    !--flag  `--flag` when VALUE is false (a negated switch such as --no-restart-on-failure)
    *--flag  `--flag LINE` for each non-empty line of VALUE (repeatable flags: --env, --label)
    +        each non-empty line of VALUE as one word (the program arguments after `--`)

Values only ever travel as single argv words: no parameter is parsed by a shell.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.steps.params import Param, params

__all__ = ["FIXED_BY_POD", "Input", "StepCommand", "output_names", "step_command"]

# Where the step runs is fixed by the workflow pod (in-cluster config, its ServiceAccount),
# not chosen per run: these arguments are left out of every template.
FIXED_BY_POD = frozenset({"kubeconfig", "context", "backend", "local_dir"})
# The run identity is the workflow's: a retried step attaches to the job it created.
RUN_ID = ("run_id", "{{workflow.uid}}")
BOOL_VALUES = ("true", "false")


@dataclass(frozen=True)
class Input:
    name: str  # Argo parameter name: the flag without its dashes
    spec: str  # how RUN_SCRIPT turns the value into argv (module docstring)
    default: str | None  # None: required
    description: str
    enum: tuple[str, ...] | None = None


@dataclass(frozen=True)
class StepCommand:
    """The `vpipe` command of one step as Argo parameters."""

    words: tuple[str, ...]  # e.g. ("train", "tf")
    inputs: tuple[Input, ...]
    fixed: tuple[tuple[str, str], ...]  # (flag, value) pairs every run gets, e.g. --run-id {{workflow.uid}}
    left_out: tuple[str, ...]  # step parameters the CLI has no flag for (so no template can pass them)

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


def _long_flag(action: argparse.Action) -> str:
    return next(flag for flag in action.option_strings if flag.startswith("--"))


def command_parser(words: Sequence[str]) -> argparse.ArgumentParser:
    """The `vpipe` parser of a (sub)command, e.g. ("train", "tf")."""
    from volcano_pipelines.cli import build_parser

    parser = build_parser(words[0] if words else None)
    for word in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


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


def _lines(help_text: str, action: argparse.Action) -> str:
    item = action.metavar or "value"
    return f"{_plain(help_text)} (one {item} per line)".strip()


def _inputs_for(param: Param, actions: list[argparse.Action]) -> list[Input]:
    out = []
    for action in actions:
        help_text = param.help or (action.help or "").replace("%%", "%")  # argparse's escape, not the text
        default = None if param.required else _text(param.default)
        if not action.option_strings:  # positional: SRC, DST; optional (nargs ?): reap's JOB
            out.append(Input(_dashes(param.name), "_" if action.nargs == "?" else ".", default, help_text))
        elif isinstance(action, argparse._StoreTrueAction):
            out.append(Input(_dashes(param.name), "?" + _long_flag(action), default or "false", help_text, BOOL_VALUES))
        elif isinstance(action, argparse._StoreFalseAction):
            out.append(Input(_dashes(param.name), "!" + _long_flag(action), default or "true", help_text, BOOL_VALUES))
        elif isinstance(action, argparse._AppendAction):
            out.append(Input(_dashes(param.name), "*" + _long_flag(action), default or "", _lines(help_text, action)))
        elif ":" in action.dest:  # one flag per task: --worker-cpu
            flag = _long_flag(action)
            task = action.dest.split(":", 1)[1]
            out.append(Input(flag[2:], flag, "", f"{_plain(help_text)} ({task})"))
        else:
            choices = tuple(str(c) for c in action.choices) if action.choices else None
            out.append(Input(_dashes(param.name), _long_flag(action), default, help_text, choices))
    return out


def step_command(step: Callable[..., Any], words: Sequence[str], *, required: Sequence[str] = ()) -> StepCommand:
    """The Argo parameters of `step` as run by `vpipe <words>`. `required`: parameters a
    template must be given although the step has a default (e.g. a train step's timeout,
    which bounds the pod's activeDeadlineSeconds)."""
    from volcano_pipelines.cli import flags

    parser = command_parser(words)
    takes_extra = bool(parser.get_default("takes_extra"))
    inputs: list[Input] = []
    fixed: list[tuple[str, str]] = []
    left_out: list[str] = []
    for param in params(step):
        if param.name in FIXED_BY_POD:
            continue
        # cli/lifecycle.py spells one-pod resources (cpu, memory, gpus) as plain flags with dest plain_<name>.
        actions = [a for a in parser._actions
                   if a.dest in (param.name, f"plain_{param.name}") or a.dest.startswith(param.name + ":")]
        if param.name == RUN_ID[0] and actions:
            fixed.append((_long_flag(actions[0]), RUN_ID[1]))
            continue
        if not actions:
            if takes_extra and flags.flag_for(step, param.name, ()) == "arguments after --":
                inputs.append(Input(_dashes(param.name), "+", "", f"{param.help} (one per line)".strip()))
            else:
                left_out.append(param.name)
            continue
        for item in _inputs_for(param, actions):
            if item.name in required:
                item = dataclasses.replace(item, default=None)
            inputs.append(item)
    return StepCommand(tuple(words), tuple(inputs), tuple(fixed), tuple(left_out))


# --- outputs -------------------------------------------------------------------------------

_SCALARS = {"str", "int", "float", "bool", "None"}
_ZERO: dict[str, Any] = {"str": "", "int": 0, "float": 0.0, "bool": False}


def _is_scalar(annotation: Any) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return all(part.strip() in _SCALARS for part in text.split("|"))


def output_names(step: Callable[..., Any]) -> list[str]:
    """The result's scalar fields (phase, succeeded, copied, ...): each becomes an output
    parameter. Read from the step's return type: the dataclass fields, plus what to_dict()
    adds (SyncResult.ok)."""
    result_type = typing.get_type_hints(step)["return"]
    fields = {f.name: f for f in dataclasses.fields(result_type)}
    sample = result_type(**{
        name: _ZERO.get(str(f.type).split("|")[0].strip()) for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    })
    out = []
    for key, value in sample.to_dict().items():
        scalar = _is_scalar(fields[key].type) if key in fields else isinstance(value, (str, int, float, bool))
        if scalar:
            out.append(_dashes(key))
    return out
