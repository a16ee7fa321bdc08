"""What the CLI says is written in its own words (issue 33, item 13): flags, not the Python
names of fields or arguments, in errors and in help; no dict examples in help; a `--no-X`
switch says what it does."""

from __future__ import annotations

import re

import pytest

from volcano_pipelines.cli import main
from volcano_pipelines.cli.flags import negated_help

SHA = "a" * 64
# A Python name with an underscore or a dotted spec path (code.url, storage.data_dir).
PYTHON_NAME = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b|\b(?:code|storage|job)\.[a-z_]+\b")


@pytest.mark.parametrize(("argv", "flag", "named"), [
    (["render", "tf", "--name", "j", "--code-url", "http://a/", "--code-path", "x"], "--code-url", "--code-path"),
    (["render", "tf", "--name", "j", "--code-url", "http://a/", "--code-sha256", SHA], "--code-sha256", "--code-url"),
    (["render", "tf", "--name", "j", "--data-dir", "/l", "--log-dir", "/l"], "--log-dir", "--data-dir"),
    (["reap", "--selector", "a=b", "--delete-deployment", "--delete-namespace", "--kubeconfig", "/none"],
     "--delete-deployment", "--delete-namespace"),
])
def test_errors_name_flags_in_their_explanation_too(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str,
                                                    named: str) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    # A flag with a value reads `invalid --flag=VALUE:`, a switch `invalid --flag:` (never `=True`).
    assert re.match(rf"vpipe: error: invalid {re.escape(flag)}[=:]", err) and "=True" not in err, err
    assert named in err.split(":", 2)[2], err
    assert not PYTHON_NAME.findall(err), err


def test_a_bare_reap_says_what_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["reap"])
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert "a JOB or --selector SELECTOR is needed" in err and "None" not in err


@pytest.mark.parametrize("command", [["train", "tf"], ["train", "mpi"], ["tensorboard"], ["serve"]])
def test_help_has_no_dict_examples_and_no_turn_off(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert not re.findall(r'\{"(?:worker|ps|chief|mpiworker|)":', text), text  # per-task dicts (JSON payloads are fine)
    assert "turn off:" not in text and "false:" not in text, text
    assert not [w for w in PYTHON_NAME.findall(text) if w.replace("_", "-") in text], text  # a flag's name, Python-spelled


def test_no_wait_says_what_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "tf", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--no-wait submit and return (default: wait for the job to finish)" in text


@pytest.mark.parametrize(("text", "said"), [
    ("wait for the job to finish (false: submit and return)", "submit and return (default: wait for the job to finish)"),
    ("a failed pod restarts the job; false: it ends the job (Terminated)",
     "it ends the job (Terminated) (default: a failed pod restarts the job)"),
    ("keep the thing", "turn off: keep the thing"),
])
def test_negated_help(text: str, said: str) -> None:
    assert negated_help(text) == said
