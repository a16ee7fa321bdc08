"""A registered one-word step with no command module of its own gets `vpipe WORD` generated
from its declaration (cli/generic.py): positional words, flags from its signature, the result
printed, errors naming the flag, the exit code from `succeeded`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import pytest

from volcano_pipelines import cli
from volcano_pipelines.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, InputError
from volcano_pipelines.steps.registry import Step


@dataclass(frozen=True)
class GreetResult:
    greeting: str
    succeeded: bool
    seen: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"greeting": self.greeting, "succeeded": self.succeeded, "seen": self.seen}


def greet(name: str, *, times: int = 1, loud: bool = False, tags: list[str] | None = None) -> GreetResult:
    """Greet someone.

    Args:
        name: who to greet
        times: how many times
        loud: shout
        tags: labels to echo back
    """
    if times < 1:
        raise InputError("times", times, "at least 1")
    text = " ".join([f"hello {name}"] * times)
    return GreetResult(text.upper() if loud else text, name != "nobody", list(tags or []))


class _TestStep(Step):
    def function(self) -> Callable[..., Any]:
        return greet


GREET = _TestStep("greet", "_greet", "GreetResult", ("greet",), "Greet someone. Politely.", positional=("name",))


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cli.steps_for
    monkeypatch.setattr(cli, "steps_for", lambda front_end: (*real(front_end), GREET))


def test_the_generated_command_runs_the_step_and_prints_each_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["greet", "world", "--times", "2", "--loud", "--tags", "a", "--tags", "b"]) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out == ["greeting: HELLO WORLD HELLO WORLD", "succeeded: True", 'seen: ["a", "b"]']


def test_json_and_the_exit_code_come_from_the_result(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["greet", "nobody", "--json", "-q"]) == EXIT_FAILED
    assert json.loads(capsys.readouterr().out) == {"greeting": "hello nobody", "succeeded": False, "seen": []}


def test_an_error_names_the_flag_and_a_missing_word_is_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["greet", "world", "--times", "0"]) == EXIT_BAD_INPUT
    assert "invalid --times=0: at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(["greet"])
    assert stop.value.code == EXIT_BAD_INPUT and "NAME" in capsys.readouterr().err


def test_it_is_listed_and_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "greet someone" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["greet", "--help"])
    text = capsys.readouterr().out
    assert "Greet someone. Politely." in text and "--times" in text and "--json" in text and "who to greet" in text


def test_a_step_with_a_command_module_keeps_it() -> None:
    generated = {item.name for item in cli.generated_commands()}
    assert "greet" in generated and generated.isdisjoint({"sync", "reap", "tensorboard", "serve", "status"})


def test_a_step_under_new_words_is_listed_and_runs_with_no_table(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A two-word step whose first word no other command has: `vpipe --help` lists the word (with
    its steps' lines, the registry having no GROUPS line for it), `vpipe WORD --help` the step."""
    again = _TestStep("greet_again", "_greet", "GreetResult", ("hello", "again"), "Greet someone again. Politely.",
                      positional=("name",))
    registered = cli.steps_for
    monkeypatch.setattr(cli, "steps_for", lambda front_end: (*registered(front_end), again))
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = " ".join(capsys.readouterr().out.split())
    assert "hello greet someone again" in listed and "greet greet someone" in listed
    with pytest.raises(SystemExit):
        cli.main(["hello", "--help"])
    assert "again greet someone again" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["hello", "again", "world"]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[0] == "greeting: hello world"
