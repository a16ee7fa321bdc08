"""`vpipe render tf|mpi`, `vpipe train tf|mpi`, `vpipe status`: flags in, one step call, output.
The flags come from the step signatures (cli/flags.py); nothing here decides about values."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from volcano_pipelines.cli import flags
from volcano_pipelines.errors import EXIT_FAILED, EXIT_OK, InputError
from volcano_pipelines.manifest import to_yaml
from volcano_pipelines import steps
from volcano_pipelines.interface.params import gather, group_fields, params
from volcano_pipelines.steps import TrainResult
from volcano_pipelines.steps.registry import CLI, Step, steps_for
from volcano_pipelines.volcano.report_lines import progress_from_dicts
from volcano_pipelines.volcano.stalls import describe_stalled
from volcano_pipelines.volcano.summary import JobSummary, format_training, summary_lines
from volcano_pipelines.volcano.status import FAILED_PHASES, FINAL_PHASES, TaskCounts


def register_step(parser: argparse.ArgumentParser, item: Step) -> None:
    """Fill in `vpipe render tf|mpi`, `vpipe train tf|mpi` or `vpipe status` (the parser
    cli/__init__.py made from the registry, with the step's help line)."""
    step = item.function()
    if item.words == ("status",):
        connection = " ".join(f"[--{name} {name.upper()}]" for name, _, _, _ in group_fields(steps.Connection))
        parser.usage = f"vpipe status JOB [-n NAMESPACE] {connection} [--log-lines N] [--post-mortem] [--local-dir DIR] [--json]"
        parser.add_argument("job", help="job name")
        flags.add_step_flags(parser, step, (), skip={"name"})
        parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
        parser.set_defaults(handler=_status, parser=parser)
        return
    command, kind = item.words
    parser.description = item.short_help + ". Arguments for the entry point (TF) or the program (MPI) go after --."
    parser.usage = f"vpipe {command} {kind} --name NAME [flags] [-- ARGS]"
    flags.add_step_flags(parser, step, item.tasks)
    if item.result is None:  # render: nothing is sent
        train = next(other for other in steps_for(CLI) if other.words == ("train", kind))
        _where_it_would_go(parser, train.function())
        handler = _render
    else:
        output = parser.add_argument_group("output")
        output.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
        output.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
        handler = _train
    parser.set_defaults(handler=handler, step=step, tasks=item.tasks, kind=kind, takes_extra=True, parser=parser)


def _where_it_would_go(parser: argparse.ArgumentParser, train_fn: Callable[..., Any]) -> None:
    """`vpipe render` without -n shows the namespace `vpipe train` would submit to (the
    connection's context's), so `render | kubectl apply -f -` and train agree."""
    helps = {p.name: p.help for p in params(train_fn)}
    for action in parser._actions:
        if action.dest == "namespace":
            action.default, action.help = None, helps["namespace"]
    group = parser.add_argument_group("where the job would go (read from the connection's configuration, nothing is sent)")
    for name, _, _, doc in group_fields(steps.Connection):
        group.add_argument(f"--{name}", help=doc.help)


def _kwargs(args: argparse.Namespace) -> dict[str, Any]:
    extra: Sequence[str] = args.extra
    kwargs = flags.step_kwargs(args, args.step, args.tasks, extra)
    if args.kind == "mpi":
        command = kwargs.pop("command", None)
        if command and extra:
            raise InputError("--command", command, "either --command or a program after --, not both")
        if not command and not extra:  # `invalid --command=[]` named a value nobody typed
            raise InputError("--command", None, "the program for mpiexec to run: --command 'PROGRAM ARGS', or the "
                                                "program and its arguments after -- (vpipe train mpi --name J -- "
                                                "python train.py)")
        try:
            kwargs["command"] = shlex.split(command) if command else list(extra)
        except ValueError as err:
            raise InputError("--command", command, f"a command line with balanced quotes ({err})") from None
    return kwargs


def _call(args: argparse.Namespace, **fixed: Any) -> Any:
    """Run the step; an error names the flag the user typed."""
    try:
        return args.step(**_kwargs(args), **fixed)
    except InputError as err:
        typed = flags.flag_error(args.step, err, args.tasks, args)
        if typed is None:
            raise
        raise typed from None


def _render(args: argparse.Namespace) -> int:
    if args.namespace is None:  # where `vpipe train` would submit it
        try:
            args.namespace = steps.target_namespace(gather(steps.Connection, vars(args)))
        except InputError as err:
            raise InputError(f"--{err.field}", err.value, err.allowed) from None
    sys.stdout.write(to_yaml(_call(args)))
    return EXIT_OK


def _train(args: argparse.Namespace) -> int:
    from volcano_pipelines.cli.progress import configure_logging, make_progress  # train only: render stays light

    configure_logging(quiet=args.quiet)
    progress = make_progress(sys.stderr, quiet=args.quiet)
    try:
        result: TrainResult = _call(args, progress=progress)
    finally:
        progress.close()
    if result.manifest is not None and not args.json:
        # Only the manifest on stdout: `vpipe train ... --dry-run > job.yaml` is valid YAML.
        sys.stdout.write(to_yaml(result.manifest))
        print(f"dry run: job {result.namespace}/{result.name} was not created", file=sys.stderr)
        return EXIT_OK
    _report(result, as_json=args.json)
    if result.post_mortem and result.post_mortem.get("markdown") and not args.json:
        print(f"post-mortem record: {result.post_mortem['markdown']} ({_post_mortem_command(args, result)})",
              file=sys.stderr)
    if not getattr(args, "wait", True):
        # --no-wait: the step's work is the submission; a job merely not finished yet is fine,
        # one that already failed (a re-run attached to it) is not.
        return EXIT_FAILED if result.phase in FAILED_PHASES else EXIT_OK
    return EXIT_OK if result.succeeded else EXIT_FAILED


def _post_mortem_command(args: argparse.Namespace, result: TrainResult) -> str:
    """The command that shows the record of the job that just ran, from the same directory."""
    words = ["vpipe", "status", result.name, "-n", result.namespace, "--post-mortem"]
    for flag in ("local_dir", "local_log_dir"):
        if getattr(args, flag, None) is not None and result.backend == "local":
            words += [f"--{flag.replace('_', '-')}", getattr(args, flag)]
    return shlex.join(words)


def _status(args: argparse.Namespace) -> int:
    kwargs = flags.step_kwargs(args, steps.status, (), ())
    try:
        result = steps.status(args.job, **{k: v for k, v in kwargs.items() if k != "name"})
    except InputError as err:
        flag = "JOB" if err.field in ("job", "name") else flags.flag_for(steps.status, err.field, ())
        raise InputError(flag or err.field, err.value, err.allowed) from None
    if result.post_mortem and not args.json:
        print(result.post_mortem.get("summary") or "", end="")  # the record's Markdown summary
        return EXIT_OK
    _report(result, as_json=args.json)
    if not args.json and result.phase != "NotFound":
        # The job at a glance, the same few lines at any size (volcano/summary.py); its first
        # line is the one _report printed.
        summary = JobSummary(name=result.name, phase=result.phase, retries=result.retries,
                             tasks={task: TaskCounts(**counts) for task, counts in result.tasks.items()},
                             abnormal=result.abnormal, restarts=result.restarts)
        for line in summary_lines(summary)[1:]:
            print(line)
    return EXIT_OK if result.phase != "NotFound" else EXIT_FAILED


def _report(result: TrainResult, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
        return
    line = f"job {result.namespace}/{result.name}: {result.phase}"
    if result.duration_seconds is not None:
        line += f" in {result.duration_seconds:.0f}s"
    if result.retries:
        line += f", {result.retries} restart(s)"
    if result.ps_linger_seconds is not None:
        line += f"; parameter servers outlived the completion task by {result.ps_linger_seconds:.1f}s"
    print(line)
    training = progress_from_dicts(result.progress, result.last_checkpoint, result.resumed_from_step)
    if training.reported or result.phase in FINAL_PHASES:
        # What the training reported (docs/progress.md), or, once it ended, that it reported nothing.
        print(format_training(result.name, training))
    if result.stalled:
        # Hung tasks (docs/progress.md): named even when the job went on to its end.
        print(f"stalled tasks: {describe_stalled(result.stalled)}")
    if result.message:
        print(result.message, file=sys.stderr if not result.succeeded else sys.stdout)
    if result.failure and result.failure.get("log_tail"):
        print(f"last log lines of {result.failure['pod']}:\n{result.failure['log_tail']}", file=sys.stderr)
    for note in result.missing:
        print(f"not available: {note}", file=sys.stderr)
