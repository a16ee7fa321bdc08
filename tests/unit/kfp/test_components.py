"""The KFP components are the step signatures: every front-end parameter of a step is a
component input with the same default, new step arguments flow through without edits here,
and a type KFP cannot carry is refused rather than dropped."""

from __future__ import annotations

from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional

import pytest

from tests import needs

needs.module("kfp", "the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")

from kfp import components as kfp_components

from volcano_pipelines import __version__
from volcano_pipelines.kfp import components
from volcano_pipelines.kfp.compile import COMPONENT_FILES
from volcano_pipelines.kfp.generate import (
    CACHING_NOTE,
    KFP_HELP,
    UnsupportedParameter,
    component_source,
    kfp_default,
    kfp_type,
)
from volcano_pipelines.kfp.runtime import step_function
from volcano_pipelines.kfp.specs import COMPONENTS, RUNTIME_IMAGE, ComponentSource
from volcano_pipelines.interface.params import NOT_FRONT_END, params
from volcano_pipelines.interface.spelling import LOCAL_BACKEND_PARAMS

REPO = Path(__file__).resolve().parents[3]
KFP_TYPES = {"str": "String", "int": "Integer", "float": "Float", "bool": "Boolean", "list": "List", "dict": "Dict"}


def _inputs(component: Any) -> dict[str, Any]:
    return dict(component.component_spec.inputs or {})


def _check_mirrors_step(name: str, component: Any, *, descriptions: bool = True) -> None:
    spec = COMPONENTS[name]
    step = step_function(spec.step)
    inputs = _inputs(component)
    expected = {p.name for p in params(step)} - spec.skip | {extra for extra, _, _ in spec.extra_inputs}
    assert set(inputs) == expected, f"{name}: inputs differ from the step's parameters"
    for param in params(step):
        if param.name in spec.skip:
            continue
        given = inputs[param.name]
        base, _ = kfp_type(param.hint)
        assert given.type == KFP_TYPES[base], (name, param.name, given.type)
        if param.required:
            assert given.default is None and not given.optional, (name, param.name)
        else:
            assert given.optional, (name, param.name)
            assert given.default == kfp_default(param.default, base), (name, param.name, given.default, param.default)
        if descriptions and param.help:
            want = KFP_HELP.get(param.name, param.help) if not param.required else param.help
            assert given.description == want, (name, param.name)


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_every_step_parameter_is_a_component_input_with_the_same_default(name: str) -> None:
    _check_mirrors_step(name, components.ALL[name])


@pytest.mark.parametrize("name", sorted(COMPONENT_FILES))
def test_committed_component_file_loads_and_mirrors_the_step(name: str) -> None:
    loaded = kfp_components.load_component_from_file(str(REPO / COMPONENT_FILES[name]))
    # (kfp's loader does not read input descriptions back; the file has them.)
    _check_mirrors_step(name, loaded, descriptions=False)
    # A user who builds a pipeline of their own reads here that caching must be off (KFP caches
    # by default; a component cannot switch it off); the exit handler has nothing to cache.
    assert (CACHING_NOTE in (loaded.component_spec.description or "")) == (name != "finish_run"), name


def test_python_only_parameters_are_not_inputs() -> None:
    for name in ("sync", "train_tf", "train_mpi"):
        assert not NOT_FRONT_END & set(_inputs(components.ALL[name])), name


def test_local_backend_parameters_are_not_inputs_and_the_job_runs_in_the_cluster() -> None:
    # A component always runs in a cluster: `backend` and the local backend's directories are
    # not in its form (issue 21 item 10), so the train step takes its default backend.
    for name in ("train_tf", "train_mpi"):
        step = step_function(COMPONENTS[name].step)
        assert LOCAL_BACKEND_PARAMS <= {p.name for p in params(step)}, name
        assert not LOCAL_BACKEND_PARAMS & set(_inputs(components.ALL[name])), name
        assert next(p for p in params(step) if p.name == "backend").default == "cluster"
    committed = (REPO / COMPONENT_FILES["train_tf"]).read_text()
    assert "local_data_dir" not in committed and "backend:" not in committed


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_component_runs_in_the_runtime_image_of_this_version_and_installs_nothing(name: str) -> None:
    container = components.ALL[name].component_spec.implementation.container
    assert container.image == RUNTIME_IMAGE == f"volcano-pipelines/runtime:{__version__}"
    command = " ".join(container.command)
    assert "pip install" not in command
    # The body only hands over to the runtime (which calls the step).
    assert f"run_step({COMPONENTS[name].step!r}" in command


def test_outputs_are_the_declared_parameters_plus_metrics_and_summary() -> None:
    for name, spec in COMPONENTS.items():
        outputs = components.ALL[name].component_spec.outputs
        post_mortem = {"post_mortem"} if name in ("train_tf", "train_mpi", "finish_run") else set()
        assert set(outputs) == {o for o, _, _ in spec.outputs} | {"metrics", "summary"} | post_mortem, name
        assert outputs["metrics"].type.startswith("system.Metrics")
        assert outputs["summary"].type.startswith("system.Markdown")
        if post_mortem:
            assert outputs["post_mortem"].type.startswith("system.Artifact"), outputs["post_mortem"].type


def _new_step(src: str, *, max_delete: int | None = None, ratio: float = 1, tags: tuple[str, ...] = ("a",),
              limits: dict[str, int] | None = None, progress: object = None) -> None:
    """A step with arguments the real ones do not have (yet).

    Args:
        src: where from
        max_delete: refuse to delete more files than this
        ratio: a float whose default is written as an int
        tags: a tuple default
        limits: a per-task mapping
    """


def test_a_new_step_argument_becomes_an_input_without_edits_here() -> None:
    spec = ComponentSource("new_step", "sync", "A step from the future.", (("copied", "int", "files"),))
    component = components.build(spec, _new_step, base_image="x:1")
    inputs = _inputs(component)
    assert set(inputs) == {"src", "max_delete", "ratio", "tags", "limits"}  # not progress
    assert inputs["max_delete"].optional and inputs["max_delete"].default is None
    assert inputs["max_delete"].description == "refuse to delete more files than this"
    assert inputs["ratio"].type == "Float" and inputs["ratio"].default == 1.0
    assert inputs["tags"].type == "List" and inputs["tags"].default == ["a"]
    assert inputs["limits"].type == "Dict"


def _bad_step(src: str, *, when: complex = 1j) -> None:
    """Args:
        src: x
        when: a type KFP has no parameter for
    """


def test_a_parameter_kfp_cannot_carry_is_refused_not_dropped() -> None:
    spec = ComponentSource("bad", "sync", "bad", ())
    with pytest.raises(UnsupportedParameter, match="complex"):
        component_source(spec, _bad_step)


def _clashing_step(src: str, *, metrics: str = "") -> None:
    """Args:
        src: x
        metrics: same name as an output artifact
    """


def test_a_parameter_named_like_an_output_artifact_is_refused() -> None:
    with pytest.raises(UnsupportedParameter, match="metrics"):
        component_source(ComponentSource("c", "sync", "c", ()), _clashing_step)


@pytest.mark.parametrize(("hint", "expected"), [
    (str, ("str", False)), (str | None, ("str", True)),
    (Optional[int], ("int", True)),  # noqa: UP045 - the old spelling must work too
    (Sequence[str], ("list", False)), (Mapping[str, Mapping[str, str]] | None, ("dict", True)),
    (float | None, ("float", True)), (bool, ("bool", False)), (Literal["a", "b"], ("str", False)),
])
def test_kfp_type(hint: Any, expected: tuple[str, bool]) -> None:
    assert kfp_type(hint) == expected


def test_a_type_kfp_cannot_carry_is_refused() -> None:
    with pytest.raises(UnsupportedParameter):
        kfp_type(bytes)


def _quoting_step(src: str) -> None:
    """Args:
        src: a \\ backslash and \"\"\" quotes
    """


def test_help_text_with_quotes_and_backslashes_survives_the_docstring() -> None:
    function = components.define(ComponentSource("q", "sync", 'say """hi"""', ()), _quoting_step)
    assert function.__doc__.startswith('say """hi"""')
    assert 'src: a \\ backslash and """ quotes' in function.__doc__


def _greet(name: str, *, loud: bool = False) -> dict[str, Any]:
    """Greet.

    Args:
        name: who
        loud: shout
    """
    return {"name": name, "loud": loud}


def test_a_step_whose_result_marks_no_output_still_builds_a_component_with_none() -> None:
    # KFP refuses a NamedTuple return type with no fields (AttributeError at import, which took
    # every KFP test down with it): such a component returns nothing instead.
    spec = ComponentSource("greet", "greet", "Greet someone.", outputs=())
    source = component_source(spec, _greet)
    assert ") -> None:" in source and "NamedTuple" not in source and "Returns:" not in source
    component = components.build(spec, _greet)
    assert set(component.component_spec.outputs or {}) == {"metrics", "summary"}  # every component's artifacts only
    assert set(_inputs(component)) >= {"name", "loud"}
