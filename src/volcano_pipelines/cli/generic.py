"""`vpipe WORDS` for a registered step that names no command module of its own: the command is
generated from the step's declaration (steps/registry.py) — its words, help line, summary and
positional parameters — and its signature (flags from cli/flags.py, as every step command
has them); one step call; the result out (`--json`: its to_dict(); else one `name: value` line
per field). A new step thus runs from the command line once it is registered; a module named by
its declaration (`cli=`) replaces this where a step wants its own usage, flags or output.
`call_step` is how every step command calls its step: an error names the flag the user typed."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from volcano_pipelines.cli import flags
from volcano_pipelines.cli.progress import configure_logging, make_progress
from volcano_pipelines.errors import EXIT_FAILED, EXIT_OK, InputError
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps.registry import Step

__all__ = ["call_step", "print_result", "register_step"]


def register_step(parser: argparse.ArgumentParser, item: Step) -> None:
    """Fill in `vpipe WORDS` (the parser cli/__init__.py made, with the step's help and summary)."""
    step = item.function()
    known = {p.name: p for p in params(step)}
    for name in item.positional:
        parser.add_argument(name, metavar=name.upper(), help=known[name].help)
    flags.add_step_flags(parser, step, item.tasks, skip=item.positional)
    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    output.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(handler=lambda args: _run(item, args), parser=parser)


def _run(item: Step, args: argparse.Namespace) -> int:
    step = item.function()
    kwargs = flags.step_kwargs(args, step, item.tasks, ())
    result = call_step(args, step, kwargs, {name: name.upper() for name in item.positional}, tasks=item.tasks)
    print_result(result, as_json=args.json)
    return EXIT_OK if getattr(result, "succeeded", True) else EXIT_FAILED


def call_step(args: argparse.Namespace, step: Callable[..., Any], kwargs: Mapping[str, Any],
              positional: Mapping[str, str], *, tasks: Iterable[str] = (), plain: Iterable[str] = ()) -> Any:
    """Run the step (with a progress reporter, if it takes one); an InputError names the flag
    or the positional word (`positional`: parameter -> its metavar) the user typed; `plain`:
    parameters given as `--NAME` whatever their usual spelling."""
    configure_logging(quiet=args.quiet)
    progress = make_progress(sys.stderr, quiet=args.quiet)
    extra = {"progress": progress} if "progress" in inspect.signature(step).parameters else {}
    try:
        return step(**kwargs, **extra)
    except InputError as err:
        if err.field in positional:
            raise InputError(positional[err.field], err.value, err.allowed) from None
        if err.field in set(plain):
            raise InputError(f"--{err.field}", err.value, flags.in_flags(step, err.allowed, tuple(tasks))) from None
        typed = flags.flag_error(step, err, tuple(tasks))
        if typed is None:
            raise
        raise typed from None
    finally:
        progress.close()


def print_result(result: Any, *, as_json: bool) -> None:
    data = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    if as_json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return
    for name, value in data.items():
        shown = value if isinstance(value, (str, int, float, bool)) or value is None else json.dumps(value, sort_keys=True)
        print(f"{name}: {shown}")
