"""`vpipe`: the command-line front end. Each subcommand lives in its own module that
exposes `register(subparsers)`; the handler it sets returns an exit code. No logic here:
arguments are translated to step calls, errors to exit codes (DESIGN.md)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from volcano_pipelines import __version__
from volcano_pipelines.errors import EXIT_BAD_INPUT, EXIT_OK, VpipeError

# Each module registers its own subcommands; add a module here to add a command.
COMMAND_MODULES: tuple[str, ...] = ("volcano_pipelines.cli.train", "volcano_pipelines.cli.sync")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep the message one line
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"vpipe: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="vpipe", description="Volcano training pipeline steps")
    parser.add_argument("--version", action="version", version=f"vpipe {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
