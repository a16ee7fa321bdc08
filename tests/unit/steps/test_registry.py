"""The step registry (steps/registry.py) is the one list of steps: the package exports what it
lists, every front end shows exactly the steps it names, and no other module keeps a list of
steps of its own (the drift test at the end)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import typing
from pathlib import Path

import pytest

from tests.helpers.source import parsed

import volcano_pipelines.steps as steps_package
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps.registry import (ARGO, CLI, GROUPS, KFP, STEPS, WHOLE, Step, exports, output_type,
                                              steps_for)

SRC = Path(__file__).resolve().parents[3] / "src" / "volcano_pipelines"
IDS = [item.name for item in STEPS]


def test_the_package_exports_every_step_and_result() -> None:
    assert set(exports()) <= set(steps_package.__all__)
    for name in exports():
        assert getattr(steps_package, name).__name__ == name
    for name in steps_package.__all__:
        assert hasattr(steps_package, name), name


def test_no_step_module_is_public() -> None:
    """Front ends import from volcano_pipelines.steps; the step modules are private, and none
    is named like a function it exports (the module attribute would hide the function)."""
    modules = {p.stem for p in (SRC / "steps").glob("*.py")}
    # Descriptions the front ends read, not steps: the registry, parameters, spellings, pipelines.
    public = modules - {"__init__", "params", "registry", "spelling", "pipelines"}
    assert all(name.startswith("_") for name in public), public
    assert not modules & set(steps_package.__all__)


@pytest.mark.parametrize("item", STEPS, ids=IDS)
def test_each_step_returns_its_declared_result_type(item: Step) -> None:
    returned = typing.get_type_hints(item.function())["return"]
    if item.result is None:
        assert typing.get_origin(returned) is dict or returned is dict
    else:
        assert returned is item.result_type()


@pytest.mark.parametrize("item", STEPS, ids=IDS)
def test_every_front_end_parameter_has_help(item: Step) -> None:
    missing = [p.name for p in params(item.function()) if not p.help]
    assert missing == []


@pytest.mark.parametrize("item", steps_for(KFP), ids=[i.name for i in steps_for(KFP)])
def test_outputs_are_fields_of_the_result_type(item: Step) -> None:
    result_type = item.result_type()
    outputs = item.outputs()
    names = [out.name for out in outputs]
    where = f"{item.result}.OUTPUTS (steps/{item.module}.py, outputs.py)"
    assert outputs, f"{where} marks no output: it ends with Output('result', WHOLE) at least"
    assert len(names) == len(set(names)), f"{where} names an output twice: {names}"
    assert outputs[-1].source == WHOLE and outputs[-1].name == "result", f"{where} must end with Output('result', WHOLE)"
    fields = {f.name for f in dataclasses.fields(result_type)}
    for out in outputs[:-1]:
        assert out.source in fields or isinstance(getattr(result_type, out.source, None), property), out
        assert output_type(result_type, out) in (str, int, float, bool), out


def test_kfp_components_are_the_registry_kfp_steps() -> None:
    from volcano_pipelines.kfp import components
    from volcano_pipelines.kfp.compile import COMPONENT_FILES
    from volcano_pipelines.kfp.runtime import _REPORTS

    names = [item.name for item in steps_for(KFP)]
    assert list(components.ALL) == names == list(COMPONENT_FILES)
    assert components.train_tf is components.ALL["train_tf"]
    # A result type with no entry gets the generic summary (kfp/summary.py result_markdown);
    # an entry for a type no KFP step returns is stale.
    stale = sorted(set(_REPORTS) - {item.result for item in steps_for(KFP)})
    assert stale == [], f"kfp/runtime.py _REPORTS names result types no KFP step returns: {stale}"
    for item in steps_for(KFP):
        outputs = components.ALL[item.name].component_spec.outputs
        assert [name for name in outputs if name not in ("metrics", "summary", "post_mortem")] == \
            [out.name for out in item.outputs()]


def test_argo_templates_are_the_registry_argo_steps() -> None:
    from volcano_pipelines.argo import templates

    assert {name: spec.words for name, spec in templates.STEPS.items()} == {
        item.template: item.words for item in steps_for(ARGO)}
    assert set(templates._ARGO_OPTIONS) <= {item.name for item in steps_for(ARGO)}


@pytest.mark.parametrize("item", steps_for(CLI), ids=[i.name for i in steps_for(CLI)])
def test_every_cli_step_is_a_vpipe_command(item: Step) -> None:
    import argparse

    from volcano_pipelines.cli import build_parser

    command = " ".join(item.words)
    missing = (f"no `vpipe {command}` command for step {item.name}: cli/{item.cli or 'generic'}.py "
               f"register_step(parser, step) must set its handler")
    parser = build_parser(item.words[0])
    for word in item.words:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        assert sub is not None and word in sub.choices, missing
        parser = sub.choices[word]
    assert parser.get_default("handler") is not None, missing


def _sub(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _listed(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    """A parser's command list: each word -> the help line it shows."""
    return {choice.dest: choice.help for choice in _sub(parser)._choices_actions}


def test_vpipe_help_lists_every_cli_step_with_its_one_help_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The command list is the registry's CLI steps (then the tools, which are no steps), each
    with the one help line its declaration gives, the same whichever command is being parsed;
    a step missing from `vpipe --help` fails here."""
    from volcano_pipelines import cli

    words = list(dict.fromkeys(item.words[0] for item in steps_for(CLI)))
    assert list(cli.commands()) == words + list(cli.TOOLS)
    assert set(words).isdisjoint(cli.TOOLS), "a tool named like a step's command"
    listed = _listed(cli.build_parser())
    for item in steps_for(CLI):
        line = item.short_help
        assert line and "\n" not in line, item.name
        built = cli.build_parser(item.words[0])
        assert _listed(built) == listed, f"`vpipe --help {item.words[0]}` lists other help lines than `vpipe --help`"
        if len(item.words) == 1:
            assert listed[item.words[0]] == line, item.name
        else:
            assert listed[item.words[0]] == GROUPS[item.words[0]], f"registry GROUPS has no line for {item.words[0]}"
            assert _listed(_sub(built).choices[item.words[0]])[item.words[1]] == line, item.name
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for item in steps_for(CLI):
        assert f"{item.words[0]} " in shown, f"`vpipe --help` does not list step {item.name}"


# --- drift ---------------------------------------------------------------------------------
# A literal collection naming more than half of the steps (or of the result types; in cli/, of
# the steps' `vpipe` command words: a command table) is a list of steps kept by hand. Allowed,
# with the reason:
ALLOWED_LISTS = {
    ("kfp/runtime.py", "_REPORTS"): "how the KFP UI shows each result type (a missing one: the generic summary)",
}


def _literal_names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Dict):
        items = node.keys
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items = node.elts
    else:
        return set()
    return {item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)}


def _target(parent: ast.AST | None) -> str:
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return ",".join(t.id for t in targets if isinstance(t, ast.Name))
    return ""


def test_no_module_keeps_its_own_list_of_steps() -> None:
    step_names = {item.name for item in STEPS} | {item.template for item in STEPS}
    result_names = {item.result for item in STEPS if item.result}
    command_words = {item.words[0] for item in steps_for(CLI)}
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = str(path.relative_to(SRC))
        if relative == "steps/registry.py":
            continue
        tree = parsed(path)
        for parent in ast.walk(tree):
            for node in ast.iter_child_nodes(parent):
                names = _literal_names(node)
                for known in (step_names, result_names, command_words if relative.startswith("cli/") else set()):
                    if len(names & known) * 2 > len({n for n in known if "-" not in n}):
                        if (relative, _target(parent)) not in ALLOWED_LISTS:
                            found.append(f"{relative}:{node.lineno} {_target(parent)} {sorted(names & known)}")
    assert found == []


def test_the_static_imports_match_the_lazy_exports() -> None:
    """steps/__init__ loads each name lazily (_HOMES) and imports them all under TYPE_CHECKING
    for type checkers: the two must agree."""
    tree = ast.parse((SRC / "steps" / "__init__.py").read_text())
    static = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom) and item.module
                for alias in item.names:
                    static[alias.name] = item.module.rsplit(".", 1)[1]
    unlisted = {name: home for name, home in steps_package._HOMES.items() if static.get(name) != home}
    assert unlisted == {}, ("steps/__init__.py: under `if TYPE_CHECKING:` import " +
                            "; ".join(f"{name} from volcano_pipelines.steps.{home}" for name, home in sorted(unlisted.items())))
    assert static == steps_package._HOMES


def test_a_component_pod_loads_only_the_step_it_runs() -> None:
    """kfp/runtime (what every component pod imports) must not load every step module: the
    registry is read lazily."""
    import subprocess
    import sys

    code = ("import sys, volcano_pipelines.kfp.runtime as r; r.step_function('reap'); "
            "print(sorted(m for m in sys.modules if m.startswith('volcano_pipelines.steps._')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "_reap" in loaded and "_sync" not in loaded and "_serve" not in loaded, loaded
