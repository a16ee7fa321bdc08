"""`vpipe reap`, `vpipe tensorboard`, `vpipe serve`: flags in (derived from the step
signatures, cli/flags.py), one step call, the result out. Nothing here decides about values."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from volcano_pipelines.cli import flags
from volcano_pipelines.cli.generic import call_step
from volcano_pipelines.errors import EXIT_FAILED, EXIT_OK, InputError
from volcano_pipelines.manifest import to_yaml
from volcano_pipelines import steps
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps.registry import Step

# Resource parameters are per task for training (--worker-cpu); these steps run one kind of
# pod, so they are plain flags here.
PLAIN = ("cpu", "memory", "gpus")


def register_step(parser: argparse.ArgumentParser, item: Step) -> None:
    """Fill in `vpipe reap`, `vpipe tensorboard` or `vpipe serve` (the parser cli/__init__.py
    made from the registry, with the step's help line and summary)."""
    if item.words == ("reap",):
        parser.description = ("Finish training jobs whose parameter servers keep running after the completion task "
                              "succeeded: one Volcano Job (JOB), or a sweep of everything matching --selector.")
        parser.usage = ("vpipe reap JOB [-n NAMESPACE] [flags]  |  vpipe reap --selector SELECTOR [--all-namespaces] "
                        "[--once] [flags]")
        parser.add_argument("job", nargs="?", metavar="JOB", help=_help(steps.reap, "job"))
        _add(parser, steps.reap, skip={"job"})
        parser.set_defaults(handler=_reap, parser=parser)
    elif item.words == ("tensorboard",):
        parser.usage = "vpipe tensorboard --name NAME --log-pvc PVC [--logdir PATH] [--job JOB | --ttl S] [flags]"
        _add(parser, steps.tensorboard)
        parser.set_defaults(handler=_tensorboard, parser=parser)
    elif item.words == ("serve",):
        parser.usage = ("vpipe serve --name NAME --pvc PVC [--model-name M] [--model-dir-local DIR] "
                        "[--smoke-payload JSON] [flags]")
        _add(parser, steps.serve)
        parser.set_defaults(handler=_serve, parser=parser)
    else:
        raise LookupError(f"cli/lifecycle.py writes no command for step {item.name}")


def _help(step: Callable[..., Any], name: str) -> str:
    return next(p.help for p in params(step) if p.name == name)


def _add(parser: argparse.ArgumentParser, step: Callable[..., Any], skip: set[str] | None = None) -> None:
    known = {p.name: p for p in params(step)}
    flags.add_step_flags(parser, step, (), skip=(skip or set()) | set(PLAIN))
    group = parser.add_argument_group("resources")
    for name in PLAIN:
        if name in known:
            param = known[name]
            kind = flags.scalar_flag_type(param.hint)
            group.add_argument(f"--{name}", dest=f"plain_{name}", type=kind, default=param.default,
                               help=f"{param.help} (default {param.default})")
    output = parser.add_argument_group("output")
    output.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    output.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _kwargs(args: argparse.Namespace, step: Callable[..., Any], skip: Sequence[str] = ()) -> dict[str, Any]:
    kwargs = {k: v for k, v in flags.step_kwargs(args, step, (), ()).items() if k not in skip and k not in PLAIN}
    for name in PLAIN:
        if hasattr(args, f"plain_{name}"):
            kwargs[name] = getattr(args, f"plain_{name}")
    return kwargs


def _call(args: argparse.Namespace, step: Callable[..., Any], kwargs: dict[str, Any], positional: dict[str, str]) -> Any:
    """Run the step; an error names the flag the user typed."""
    return call_step(args, step, kwargs, positional, plain=PLAIN)


def _reap(args: argparse.Namespace) -> int:
    if args.job is None and args.selector is None:  # `invalid JOB=None` said nothing to a user
        args.parser.error("a JOB or --selector SELECTOR is needed")
    kwargs = _kwargs(args, steps.reap, skip=("job",))
    result: steps.ReapResult = _call(args, steps.reap, {"job": args.job, **kwargs}, {"job": "JOB"})
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        for unit in result.reaped:
            linger = f", parameter servers gone {unit.linger_seconds:.1f}s after the completion task" if unit.linger_seconds is not None else ""
            print(f"{unit.kind} {unit.namespace}/{unit.name}: {unit.action} ({unit.reason}){linger}")
        for unit in result.failed:
            print(f"{unit.kind} {unit.namespace}/{unit.name}: {unit.action}: {unit.reason}", file=sys.stderr)
        for unit in result.waiting:
            print(f"{unit.kind} {unit.namespace}/{unit.name}: {unit.action}: {unit.reason}")
        print(result.message, file=sys.stdout if result.succeeded else sys.stderr)
    return EXIT_OK if result.succeeded else EXIT_FAILED


def _tensorboard(args: argparse.Namespace) -> int:
    result: steps.TensorboardResult = _call(args, steps.tensorboard,
                                                       _kwargs(args, steps.tensorboard), {})
    if result.manifests is not None and not args.json:
        sys.stdout.write(to_yaml(result.manifests))
        print(f"dry run: tensorboard {result.namespace}/{result.name} was not created", file=sys.stderr)
        return EXIT_OK
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        state = "ready" if result.ready else "NOT ready"
        print(f"tensorboard {result.namespace}/{result.name} {state}: {result.url}")
        for kind, url in sorted(result.urls.items()):
            if url != result.url:
                print(f"  {kind}: {url}")
        if result.message:
            print(result.message, file=sys.stderr if not result.succeeded else sys.stdout)
    return EXIT_OK if result.succeeded else EXIT_FAILED


def _serve(args: argparse.Namespace) -> int:
    kwargs = _kwargs(args, steps.serve)
    if kwargs.get("versions"):
        kwargs["versions"] = [_version(v) for v in kwargs["versions"]]
    result: steps.ServeResult = _call(args, steps.serve, kwargs, {})
    if result.manifests is not None and not args.json:
        sys.stdout.write(to_yaml(result.manifests))
        print(result.message, file=sys.stderr)
        return EXIT_OK
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    else:
        print(result.message, file=sys.stdout if result.succeeded else sys.stderr)
        if result.succeeded:
            print(f"  REST: {result.rest_endpoint}\n  gRPC: {result.grpc_endpoint}")
        for line in result.warnings:
            print(f"warning: {line}", file=sys.stderr)
    return EXIT_OK if result.succeeded else EXIT_FAILED


def _version(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit():
        raise InputError("--versions", raw, "an integer version number")
    return int(raw)
