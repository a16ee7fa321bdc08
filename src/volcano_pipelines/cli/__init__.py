"""`vpipe`: the command-line front end. The step commands are read from the step registry
(steps/registry.py): each registered CLI step is `vpipe <words>`, listed with its one-line help
(`Step.short_help`); the module its declaration names (`cli=`) fills in its flags and handler
(`register_step(parser, step)`), or cli/generic.py generates them. The other commands (tools, not
steps) are `TOOLS`, each module exposing `register(subparsers)`. A handler returns an exit code.
No logic here: arguments are translated to step calls, errors to exit codes (docs/design.md)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from volcano_pipelines import __version__
from volcano_pipelines.errors import EXIT_BAD_INPUT, EXIT_OK, InputError, VpipeError
from volcano_pipelines.steps.registry import CLI, GROUPS, Step, steps_for

__all__ = ["TOOLS", "build_parser", "command_help", "commands", "generated_commands", "main", "step_commands"]

# The commands that are not steps: the module that registers each, and its one-line help (the
# module reads it from here: `command_help`). Only the module of the command being run is
# imported (`vpipe --help`, `render` and `sync` never load the Kubernetes client, the sync
# engine or KFP); the others appear in usage and help from their declarations.
TOOLS: dict[str, tuple[str, str]] = {
    "compile": ("volcano_pipelines.cli.compile",
                "write the generated pipeline artifacts (components/*.yaml, pipelines/*.yaml)"),
    "schedule": ("volcano_pipelines.cli.schedule", "schedule recurring retraining (KFP recurring run)"),
    "pv": ("volcano_pipelines.cli.admin", "admin: PersistentVolume helpers"),
    "namespace": ("volcano_pipelines.cli.admin", "admin: namespace helpers"),
    "quickstart": ("volcano_pipelines.cli.examples",
                   "run the quickstart (sample data, TF training on this machine, one prediction)"),
    "examples": ("volcano_pipelines.cli.examples",
                 "copy the examples (quickstart, TF / MPI training code, sample data) into a directory"),
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


def step_commands() -> dict[str, tuple[Step, ...]]:
    """Each first command word of the registered CLI steps (in the registry's order) -> the
    steps it runs: one for `vpipe reap`, several for `vpipe train tf|mpi`."""
    out: dict[str, tuple[Step, ...]] = {}
    for item in steps_for(CLI):
        out[item.words[0]] = (*out.get(item.words[0], ()), item)
    return out


def commands() -> tuple[str, ...]:
    """Every command word `vpipe --help` lists: the steps', then the tools'."""
    return (*step_commands(), *TOOLS)


def command_help(word: str) -> str:
    """The one-line help of `vpipe WORD`: a step's, a shared first word's (registry GROUPS; else
    its steps' lines), or a tool's."""
    if word in TOOLS:
        return TOOLS[word][1]
    items = step_commands()[word]
    if items[0].words == (word,):
        return items[0].short_help
    return GROUPS.get(word) or "; ".join(item.short_help for item in items)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with every command listed; only `command`'s module registers its flags."""
    parser = _Parser(prog="vpipe", description="Volcano training pipeline steps")
    parser.add_argument("--version", action="version", version=f"vpipe {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for word, items in step_commands().items():
        if word != command:
            subparsers.add_parser(word, help=command_help(word), add_help=False)
        elif items[0].words == (word,):
            _add_step(subparsers, items[0])
        else:
            group = subparsers.add_parser(word, help=command_help(word))
            kinds = group.add_subparsers(dest=f"{word}_command", required=True, parser_class=_Parser)
            for item in items:
                _add_step(kinds, item)
    module = TOOLS[command][0] if command in TOOLS else None
    registered = False
    for name, (home, text) in TOOLS.items():
        if home != module:
            subparsers.add_parser(name, help=text, add_help=False)
        elif not registered:
            importlib.import_module(home).register(subparsers)
            registered = True
    return parser


def _add_step(subparsers: argparse._SubParsersAction[_Parser], item: Step) -> None:
    """`vpipe <words>` for one step: its help line and description from the registry, the rest
    from the module its declaration names (or the generated command)."""
    parser = subparsers.add_parser(item.words[-1], help=item.short_help, description=item.summary)
    home = f"volcano_pipelines.cli.{item.cli or 'generic'}"
    importlib.import_module(home).register_step(parser, item)


def generated_commands() -> tuple[Step, ...]:
    """The registered command-line steps whose command cli/generic.py generates."""
    return tuple(item for item in steps_for(CLI) if not item.cli)


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
    """An input error that still names a step's argument (`out`, `namespace`) names what the
    user typed instead: the command's flag with that destination (`--out`, `-n`), or
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
