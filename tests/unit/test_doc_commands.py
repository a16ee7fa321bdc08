"""Every `vpipe` command and Python example in README.md and docs/*.md, checked against the
code as it is, so a doc cannot drift into commands that fail as written:

- a synopsis (`vpipe serve --name NAME --pvc PVC [--model-name M] ...`): every flag it names
  is a flag of that command, and the command with its required parts (optional groups
  dropped, placeholders filled in) is accepted by the real parser;
- a concrete command (no placeholders): accepted by the parser, and run where nothing
  outside this machine is needed (`vpipe schedule kfp` and `vpipe train` with --dry-run, which
  checks every value as the real run does, `vpipe render`, `vpipe compile --check`); commands
  naming hosts that cannot exist here (HDFS namenodes, a KFP server) are parsed only. `$PWD`
  is the checkout's root, where the docs' commands are run;
- a whole command written inline in prose (`` `vpipe train tf --name demo ...` ``: one that
  names its job, `--name`), as the commands of code blocks; shorter inline mentions
  (`vpipe train`, `vpipe tensorboard --ttl 86400`) are words, not commands;
- a Python block: it compiles; calls of the step functions bind to their signatures; runs of
  the pipelines (`create_run_from_pipeline_package`, `train_and_serve(...)(...)`) give every
  required pipeline parameter; the compile example runs.

What is not here: `scripts/quickstart` (tests/local/test_quickstart.py runs it), `scripts/test`,
`pip install` (tests/packaging), `kubectl apply -k` (tests/integration/test_manifests.py
renders the kustomizations), `argo submit` (tests/integration/test_argo_server_side.py)."""

from __future__ import annotations

import argparse
import ast
import contextlib
import inspect
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from volcano_pipelines.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
# libyaml's safe loader where PyYAML has it: the same objects, a tenth of the pure-Python parser's CPU.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(/[A-Z][A-Z0-9_]*)?(\.\.\.)?$")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    language: str
    text: str


def _blocks() -> list[Block]:
    out = []
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        inside: tuple[int, str] | None = None
        body: list[str] = []
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                if inside is None:
                    inside, body = (number, line[3:].strip()), []
                else:
                    out.append(Block(doc.name if doc.parent == REPO else f"docs/{doc.name}", inside[0], inside[1],
                                     "\n".join(body)))
                    inside = None
            elif inside is not None:
                body.append(line)
    return out


BLOCKS = _blocks()


def _commands() -> list[tuple[str, str]]:
    """(where, command) for every vpipe command in a shell or plain block; a continuation (an
    indented line, or one after a trailing backslash) joins its command."""
    found: list[tuple[str, str]] = []
    for block in BLOCKS:
        if block.language not in ("", "bash", "sh", "console"):
            continue
        current: list[str] | None = None
        where = ""
        for offset, raw in enumerate(block.text.splitlines(), 1):
            starts = re.match(r"^(\$ )?(vpipe|python -m volcano_pipelines) ", raw)
            if starts:
                if current:
                    found.append((where, " ".join(current)))
                current, where = [raw[len(starts.group(1) or ""):]], f"{block.doc}:{block.line + offset}"
            elif current is not None and (raw.startswith(" ") or current[-1].endswith("\\")) and raw.strip():
                current.append(raw.strip())
            else:
                if current:
                    found.append((where, " ".join(current)))
                current = None
        if current:
            found.append((where, " ".join(current)))
    out = []
    for where, command in found:
        command = command.replace("\\ ", " ").replace("python -m volcano_pipelines ", "vpipe ")
        command = re.split(r" {3,}", command)[0]  # a description after the synopsis
        command = re.split(r"\s#\s", command)[0]  # a shell comment
        out.extend((where, part if part.startswith("vpipe") else f"vpipe {part}")
                   for part in command.split(" | vpipe "))
    from volcano_pipelines.cli import commands

    out += _inline_commands()
    return [(w, c) for w, c in out if c.split()[1] in commands()]  # not prose that starts with "vpipe"


# Inline code in prose: `...` (may run over a line break), outside fenced blocks.
_INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def _inline_commands() -> list[tuple[str, str]]:
    """(where, command) for every whole command written inline in prose: the first a check of
    the docs missed (`--code-path examples/tf-ps`, refused, sat in a sentence of docs/lifecycle.md)."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        # Blank out fenced blocks (their commands are read above), keeping the line count.
        text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
        name = doc.name if doc.parent == REPO else f"docs/{doc.name}"
        for match in _INLINE.finditer(text):
            command = " ".join(match.group(1).split())
            if command.startswith("vpipe ") and " --name " in command:
                found.append((f"{name}:{text.count(chr(10), 0, match.start()) + 1}", command))
    return found


COMMANDS = _commands()


def _is_synopsis(command: str) -> bool:
    words = shlex.split(command)
    return any(c in command for c in "[]|") or "..." in command or any(PLACEHOLDER.match(w) for w in words)


def _leaf(words: list[str]) -> tuple[argparse.ArgumentParser, list[str], list[str]]:
    """The parser of the (sub)command the words name, the words naming it, and the rest."""
    parser = build_parser(words[0])
    path: list[str] = []
    rest = list(words)
    while rest:
        subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if subs is None or rest[0] not in subs.choices:
            break
        path.append(rest.pop(0))
        parser = subs.choices[path[-1]]
    return parser, path, rest


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def _parse(words: list[str]) -> str:
    """'' when the real parser accepts the words, else what it said."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser, path, rest = _leaf(words)
            cut = rest.index("--") if "--" in rest else len(rest)
            parser.parse_args(rest[:cut])
    except SystemExit as exit_:
        return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exit_.code}"
    return ""


def _drop_optional(text: str) -> str:
    """The synopsis without its optional groups; of alternatives, the first."""
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\[[^\[\]]*\]", "", text)
    text = re.sub(r"\(([^()|]*)\|[^()]*\)", r"\1", text)
    text = re.sub(r"(\w+)\|\w+(\|\w+)*", r"\1", text)  # tf|mpi, delete|abort
    text = text.split(" | ")[0]
    return text.replace("...", "")


def _instance(command: str) -> list[str]:
    """A concrete command from a synopsis: placeholders filled in (numbers where the flag takes one)."""
    words = shlex.split(_drop_optional(command))[1:]
    parser, path, rest = _leaf(words)
    options = _options(parser)
    out = list(path)
    for index, word in enumerate(rest):
        if PLACEHOLDER.match(word):
            action = options.get(rest[index - 1]) if index else None
            numeric = action is not None and action.type in (int, float)
            out.append("1" if numeric else word.lower().rstrip(".") or "x")
        else:
            out.append(word)
    return out


SYNOPSES = [(w, c) for w, c in COMMANDS if _is_synopsis(c)]
CONCRETE = [(w, c) for w, c in COMMANDS if not _is_synopsis(c)]


def test_the_docs_have_commands() -> None:
    assert len(SYNOPSES) >= 15 and len(CONCRETE) >= 4, (SYNOPSES, CONCRETE)


@pytest.mark.parametrize(("where", "command"), SYNOPSES, ids=[w for w, _ in SYNOPSES])
def test_a_synopsis_names_real_flags_and_parses(where: str, command: str) -> None:
    words = shlex.split(command)[1:]
    # Every flag named anywhere in the synopsis belongs to the command (or, for tf|mpi, to one of them).
    first = _drop_optional(" ".join(words)).split()
    variants = [words[1].split("|")] if len(words) > 1 and "|" in words[1] and not words[1].startswith("-") else [[]]
    parsers = [_leaf([first[0], v, *first[2:]] if v else first)[0] for v in variants[0] or [None]] if variants[0] \
        else [_leaf(first)[0]]
    known = set().union(*(_options(p) for p in parsers))
    unknown = sorted({flag for flag in FLAG.findall(command) if flag not in known})
    assert unknown == [], f"{where}: {command!r} names flags the command does not have: {unknown}"
    if " ... " in command:  # "the flags above": only the flags can be checked
        return
    problem = _parse(["vpipe", *_instance(command)][1:])
    assert problem == "", f"{where}: {command!r} as written ({_instance(command)}) is refused: {problem}"


@pytest.mark.parametrize(("where", "command"), CONCRETE, ids=[w for w, _ in CONCRETE])
def test_a_concrete_command_parses_and_runs_where_it_can(where: str, command: str,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PWD", str(REPO))
    words = [os.path.expandvars(word) for word in shlex.split(command)[1:]]
    problem = _parse(words)
    assert problem == "", f"{where}: {command!r} is refused: {problem}"
    monkeypatch.chdir(REPO)
    if words[:2] == ["schedule", "kfp"]:
        code = main([*words, "--dry-run"])
        assert code == 0, f"{where}: {command!r} --dry-run: {capsys.readouterr().err}"
    elif words[0] in ("render",) or words[:2] == ["compile", "--check"]:
        assert main(words) == 0, f"{where}: {command!r}: {capsys.readouterr().err}"
    elif words[0] == "examples":  # into a scratch directory, not the checkout
        monkeypatch.chdir(tmp_path)
        assert main(words) == 0, f"{where}: {command!r}: {capsys.readouterr().err}"
        assert any(tmp_path.rglob("quickstart.py"))
    elif words[0] == "train":  # checked as the real run checks it, nothing created or sent
        monkeypatch.chdir(tmp_path)
        cut = words.index("--") if "--" in words else len(words)
        code = main([*words[:cut], "--dry-run", *words[cut:]])
        assert code == 0, f"{where}: {command!r} --dry-run: {capsys.readouterr().err}"
    elif words[0] == "quickstart":  # trains on this machine (tests/local does that): render its job instead
        assert main([*words, "--render"]) == 0, f"{where}: {command!r} --render: {capsys.readouterr().err}"
        assert "kind: Job" in capsys.readouterr().out


# --- Python examples ---------------------------------------------------------------------------

PYTHON = [b for b in BLOCKS if b.language == "python"]


def _pipeline_required(file: str) -> set[str]:
    spec = next(yaml.load_all((REPO / file).read_text(), Loader=SAFE_LOADER))
    params = spec["root"]["inputDefinitions"]["parameters"]
    return {name for name, p in params.items() if not p.get("isOptional")}


def _literal_keywords(call: ast.Call) -> dict[str, object]:
    out: dict[str, object] = {}
    for keyword in call.keywords:
        if keyword.arg is not None:
            with contextlib.suppress(ValueError):
                out[keyword.arg] = ast.literal_eval(keyword.value)
            out.setdefault(keyword.arg, None)
    return out


@pytest.mark.parametrize("block", PYTHON, ids=[f"{b.doc}:{b.line}" for b in PYTHON])
def test_a_python_example_compiles_and_calls_what_exists(block: Block) -> None:
    tree = ast.parse(block.text, filename=f"{block.doc}:{block.line}")
    from volcano_pipelines import steps

    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in getattr(steps, "__all__", ()) and callable(getattr(steps, name, None)):
            signature = inspect.signature(getattr(steps, name))
            args = [ast.literal_eval(a) for a in node.args]
            signature.bind(*args, **_literal_keywords(node))  # TypeError: an argument the step does not take
        if name == "create_run_from_pipeline_package":
            file = ast.literal_eval(node.args[0])
            given = set(_literal_keywords(node).get("arguments") or {})  # type: ignore[arg-type]
            missing = _pipeline_required(file) - given
            assert not missing, f"{block.doc}:{block.line}: the run lacks required parameters {sorted(missing)}"
        if isinstance(node.func, ast.Call) and getattr(node.func.func, "id", "") == "train_and_serve":
            kind = ast.literal_eval(node.func.args[0]) if node.func.args else "tf"
            file = "pipelines/train-and-serve.yaml" if kind == "tf" else "pipelines/train-and-serve-mpi.yaml"
            missing = _pipeline_required(file) - set(_literal_keywords(node))
            assert not missing, f"{block.doc}:{block.line}: the run lacks required parameters {sorted(missing)}"


def test_the_step_pod_compile_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = next(b for b in PYTHON if "compiler.Compiler().compile" in b.text)
    monkeypatch.chdir(tmp_path)
    exec(compile(block.text, f"{block.doc}:{block.line}", "exec"), {})  # noqa: S102 - the doc's own example
    compiled = next(yaml.load_all((tmp_path / "my-train-and-serve.yaml").read_text(), Loader=SAFE_LOADER))
    assert compiled["pipelineInfo"]["name"] == "train-and-serve"
