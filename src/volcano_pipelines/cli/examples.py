"""`vpipe quickstart` (the quickstart, from the examples this install ships: no checkout
needed) and `vpipe examples --out DIR` (a copy of the examples to read, change, and serve to a
cluster's pods as --code-url)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from types import ModuleType

from volcano_pipelines.cli import command_help
from volcano_pipelines.errors import EXIT_OK, InputError, VpipeError
from volcano_pipelines.examples import ExamplesMissing, copy_examples, examples_dir

__all__ = ["register"]


class MissingTrainExtra(VpipeError):
    exit_code = 2


def _quickstart_module() -> ModuleType:
    path = examples_dir() / "quickstart.py"
    spec = importlib.util.spec_from_file_location("volcano_pipelines_quickstart", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    try:
        quickstart: ModuleType | None = _quickstart_module()
    except ExamplesMissing:
        quickstart = None  # said when a command runs (exit 1), not as a traceback while parsing
    q = subparsers.add_parser(
        "quickstart", help=command_help("quickstart"),
        description="The quickstart from the examples this install ships (see `vpipe examples --out DIR` for the "
        "code): a sample dataset synced with the real engine, trained by TensorFlow (1 ps + 2 workers + chief) on "
        "the local backend, TensorBoard over the logs, one prediction. Training here needs the [train] extra; "
        "--render needs nothing more.")
    if quickstart is not None:
        quickstart.build_parser(q)
        for action in q._actions:  # every value a flag takes when not given, in its help, as the step commands show it
            if action.default not in (None, False, argparse.SUPPRESS) and action.help and "default" not in action.help:
                action.help += " (default %(default)s)"
    q.set_defaults(handler=lambda args: _quickstart(quickstart, args), parser=q)
    e = subparsers.add_parser(
        "examples", help=command_help("examples"),
        description="Copy the examples this install ships (quickstart.py, tf-ps/, mpi/, data/) into DIR, created "
        "if missing; refuses to overwrite an existing file.")
    e.add_argument("--out", required=True, metavar="DIR", help="where to write them")
    e.set_defaults(handler=_examples, parser=e)


def _quickstart(module: ModuleType | None, args: argparse.Namespace) -> int:
    if module is None:
        examples_dir()  # raises ExamplesMissing, naming what is missing
        raise AssertionError("unreachable")
    if args.kubeconfig:  # checked here, where the error names --kubeconfig as every command's does
        from volcano_pipelines.steps import Connection, target_namespace

        target_namespace(Connection(args.kubeconfig))
    placeholder = args.parser.get_default("code_url")
    if args.code_url == placeholder and args.kubeconfig:
        raise InputError("--code-url", None, f"with --kubeconfig, the http(s) URL where the cluster's pods fetch the "
                         f"examples' tf-ps/ (a copy: vpipe examples --out DIR); the default, {placeholder}, is a "
                         "placeholder no pod can fetch")
    if args.code_url == placeholder and args.render:
        print(f"vpipe quickstart: warning: the job fetches its code from {placeholder}, a placeholder: give --code-url "
              "with the URL where the cluster's pods fetch the examples' tf-ps/ (a copy: vpipe examples --out DIR)",
              file=sys.stderr)
    if not args.render and not args.kubeconfig and importlib.util.find_spec("tensorflow") is None:
        raise MissingTrainExtra("training on this machine needs TensorFlow, which is not installed: "
                                "pip install 'volcano-pipelines[train]' (or --render / --kubeconfig)")
    return int(module.run(args))


def _examples(args: argparse.Namespace) -> int:
    written = copy_examples(args.out)
    print(f"wrote {len(written)} files under {args.out} (quickstart: python {args.out}/quickstart.py; "
          "training code for --code-url: tf-ps/, mpi/)", file=sys.stderr)
    return EXIT_OK
