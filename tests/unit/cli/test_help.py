"""Every command's and sub-command's --help prints its help and exits 0 (a '%' in a help text
once crashed `vpipe sync --help`). The commands are found by walking the parsers, so a new one
is covered without editing this file."""

from __future__ import annotations

import argparse

import pytest

from volcano_pipelines.cli import build_parser, commands, main


def _paths() -> list[list[str]]:
    found: list[list[str]] = [[]]

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if not path and name != command:
                        continue  # only the command whose module registered its flags
                    found.append([*path, name])
                    walk(sub, [*path, name])

    for command in commands():
        walk(build_parser(command), [])
    return found


PATHS = _paths()


def test_every_command_is_walked() -> None:
    assert {p[0] for p in PATHS if p} == set(commands())
    assert ["train", "tf"] in PATHS and ["pv", "reuse"] in PATHS and ["schedule", "kfp"] in PATHS


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) or "vpipe" for p in PATHS])
def test_help_prints_and_exits_0(path: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    assert out.startswith("usage:") and err == "", err
