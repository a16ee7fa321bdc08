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

# Which module registers each top-level command. Only the module of the command being run
# is imported, so `vpipe sync` in a pod does not pay for the Kubernetes client.
COMMANDS: dict[str, str] = {
    "render": "volcano_pipelines.cli.train",
    "train": "volcano_pipelines.cli.train",
    "status": "volcano_pipelines.cli.train",
    "sync": "volcano_pipelines.cli.sync",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; keep the message one line
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"vpipe: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for one command (its module only), or for all of them (help, errors)."""
    parser = _Parser(prog="vpipe", description="Volcano training pipeline steps")
    parser.add_argument("--version", action="version", version=f"vpipe {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    modules = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    for name in dict.fromkeys(modules):
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
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
