"""`vpipe`: the command-line front end. Each command group lives in its own module that
exposes `register(subparsers)`; the handler it sets returns an exit code. No logic here:
arguments are translated to step calls, errors to exit codes (docs/design.md)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from volcano_pipelines import __version__
from volcano_pipelines.errors import EXIT_BAD_INPUT, EXIT_OK, InputError, VpipeError
from volcano_pipelines.steps.registry import CLI, Step, steps_for

__all__ = ["build_parser", "generated_commands", "main"]

# Each command, the module that registers it, and its one-line help. Only the module of the
# command being run is imported (`vpipe --help`, `render` and `sync` never load the Kubernetes
# client, the sync engine or KFP); the others appear in usage and help from this table.
COMMANDS: dict[str, tuple[str, str]] = {
    "render": ("volcano_pipelines.cli.train", "print the Volcano Job YAML for a training job"),
    "train": ("volcano_pipelines.cli.train", "submit a training job and wait for it to finish"),
    "status": ("volcano_pipelines.cli.train", "show a training job's phase and per-task counts"),
    "sync": ("volcano_pipelines.cli.sync", "stage a dataset from HDFS / WebHDFS / a directory into a mounted volume"),
    "compile": ("volcano_pipelines.cli.compile", "write the KFP components and pipelines (and Argo templates)"),
    "schedule": ("volcano_pipelines.cli.schedule", "schedule recurring retraining (KFP recurring run)"),
    "pv": ("volcano_pipelines.cli.admin", "admin: PersistentVolume helpers"),
    "namespace": ("volcano_pipelines.cli.admin", "admin: namespace helpers"),
    "reap": ("volcano_pipelines.cli.lifecycle", "end parameter servers that outlive their job's completion"),
    "tensorboard": ("volcano_pipelines.cli.lifecycle", "expose TensorBoard over a job's logs and print its URL"),
    "serve": ("volcano_pipelines.cli.lifecycle", "deploy the exported model with TF Serving and wait until it serves"),
    "quickstart": ("volcano_pipelines.cli.examples", "run the quickstart from the examples this install ships"),
    "examples": ("volcano_pipelines.cli.examples", "copy the examples (quickstart, training code) into a directory"),
}
# Flags whose value may itself start with '-' (`--mpiexec-arg -x`).
DASH_VALUE_FLAGS = frozenset({"--mpiexec-arg"})


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--gpus` must not silently mean `--gpus-per-worker`
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def format_usage(self) -> str:
        self.usage = self.usage or self.synopsis()
        return super().format_usage()

    def format_help(self) -> str:
        self.usage = self.usage or self.synopsis()
        return super().format_help()

    def synopsis(self) -> str:
        """Every command's usage in one style, where it wrote none of its own: the words, the
        positional arguments, the required flags, then `[flags]` (`vpipe pv reuse PV --for PVC
        [flags]`), not argparse's list of every option."""
        words = [self.prog]
        optional = False
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                words.append("|".join(action.choices) + " ...")
            elif not action.option_strings:
                name = str(action.metavar or action.dest.upper())
                words.append(f"{name} [{name} ...]" if action.nargs == "+" else f"[{name}]" if action.nargs == "?" else name)
            elif action.required:
                flag = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
                words.append(f"{flag} {action.metavar or action.dest.upper()}")
            elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                optional = True
        return " ".join(words + ["[flags]"] * optional)

    def error(self, message: str) -> NoReturn:  # argparse exits 2 too; keep the message one line
        required = "the following arguments are required: "
        for action in self._actions:
            # argparse names a missing command word by its destination (`pv_command`): say the words.
            if isinstance(action, argparse._SubParsersAction) and message == required + str(action.dest):
                message = f"a command is missing: {self.prog} {'|'.join(action.choices)} ..."
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command listed; only `command`'s module registers its flags."""
    parser = _Parser(prog="vpipe", description="Volcano training pipeline steps")
    parser.add_argument("--version", action="version", version=f"vpipe {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    module = COMMANDS[command][0] if command in COMMANDS else None
    if module is not None:
        importlib.import_module(module).register(subparsers)
    for name, (home, text) in COMMANDS.items():
        if home != module:
            subparsers.add_parser(name, help=text, add_help=False)
    # A one-word step with no command module of its own gets the generated command.
    for item in generated_commands():
        if item.words[0] == command:
            importlib.import_module("volcano_pipelines.cli.generic").register(subparsers, item)
        else:
            subparsers.add_parser(item.words[0], help=item.short_help, add_help=False)
    return parser


def generated_commands() -> tuple[Step, ...]:
    """The registered command-line steps whose command cli/generic.py generates."""
    return tuple(item for item in steps_for(CLI) if len(item.words) == 1 and item.words[0] not in COMMANDS)


def _split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """Arguments for the training program come only after `--`: a stray word before it is an
    error, not a silent training argument."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _join_dash_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in DASH_VALUE_FLAGS and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


# Optional dependencies (top-level module -> the extra that installs it), for a clear message
# instead of a ModuleNotFoundError traceback when a command needs one this install lacks.
EXTRAS: dict[str, str] = {
    "kfp": "kfp", "kfp_server_api": "kfp", "google": "kfp", "hera": "hera", "fsspec": "sync", "hdfs_native": "sync",
    "requests": "sync", "tensorflow": "train", "tensorboard": "train", "mpi4py": "train",
}


def _missing_extra(command: str | None, err: ModuleNotFoundError) -> int:
    top = (err.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        raise err
    # The extra is what the user installs; the module is only how we noticed (e.g. kfp's protobuf).
    print(f"vpipe: error: `vpipe {command or ''}` needs the {extra} extra, which is not installed (no module "
          f"{err.name!r}): pip install 'volcano-pipelines[{extra}]'", file=sys.stderr)
    return EXIT_BAD_INPUT


def as_typed(parser: argparse.ArgumentParser, err: VpipeError) -> VpipeError:
    """An input error that still names a step's argument (`kubeconfig`, `out`) names what the
    user typed instead: the command's flag with that destination (`--kubeconfig`, `--out`), or
    its positional word (`JOB`). The last translation, for what a command did not name itself."""
    if not isinstance(err, InputError) or not err.field.isidentifier():
        return err
    for action in parser._actions:
        if action.dest == err.field and action.option_strings:
            flag = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
            return InputError(flag, err.value, err.allowed)
        if action.dest == err.field and isinstance(action.metavar, str):
            return InputError(action.metavar, err.value, err.allowed)
    return err


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    head, extra = _split_extra(argv)
    command = next((word for word in head if not word.startswith("-")), None)
    try:
        return _main(head, extra, command)
    except ModuleNotFoundError as err:
        return _missing_extra(command, err)


def _main(head: list[str], extra: list[str], command: str | None) -> int:
    parser = build_parser(command)
    args, unknown = parser.parse_known_args(_join_dash_values(head))
    leaf: argparse.ArgumentParser = getattr(args, "parser", parser)
    if unknown:
        stray = not unknown[0].startswith("-") and getattr(args, "takes_extra", False)
        leaf.error(f"unrecognized arguments: {' '.join(unknown)}"
                   + (" (arguments for the training program go after --)" if stray else ""))
    if extra and not getattr(args, "takes_extra", False):
        leaf.error(f"unexpected arguments after --: {' '.join(extra)}")
    args.extra = extra
    try:
        return int(args.handler(args))
    except VpipeError as err:
        print(f"vpipe: error: {as_typed(leaf, err)}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error of ours.
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
