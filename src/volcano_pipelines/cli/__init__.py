"""`vpipe`: the command-line front end. Each command group lives in its own module that
exposes `register(subparsers)`; the handler it sets returns an exit code. No logic here:
arguments are translated to step calls, errors to exit codes (DESIGN.md)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from volcano_pipelines import __version__
from volcano_pipelines.errors import EXIT_BAD_INPUT, EXIT_OK, VpipeError

__all__ = ["build_parser", "main"]

# The modules that register the commands. None of them imports the Kubernetes client at
# import time, so `--help`, `render` and `sync` start fast.
COMMAND_MODULES = ("volcano_pipelines.cli.train", "volcano_pipelines.cli.sync", "volcano_pipelines.cli.lifecycle")
# Flags whose value may itself start with '-' (`--mpiexec-arg -x`).
DASH_VALUE_FLAGS = frozenset({"--mpiexec-arg"})


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `--gpus` must not silently mean `--gpus-per-worker`
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # argparse exits 2 too; keep the message one line
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vpipe", description="Volcano training pipeline steps")
    parser.add_argument("--version", action="version", version=f"vpipe {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    head, extra = _split_extra(argv)
    parser = build_parser()
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
        print(f"vpipe: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error of ours.
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
