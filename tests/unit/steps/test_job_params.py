"""The train steps' parameters are declared once (steps/_job_params.py): the flat signatures,
docstrings and spec filling come from the declarations, and a new job option (`deadline`,
the pods' activeDeadlineSeconds) is one declaration plus its builder logic."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

import pytest

from volcano_pipelines.cli import main
from volcano_pipelines.errors import InputError
from volcano_pipelines.steps import render_mpi, render_tf, train_mpi, train_tf
from volcano_pipelines.steps._job_params import (ALL_GROUPS, Connection, RenderMPIArgs, RenderTFArgs, Run, TrainMPIArgs,
                                                 TrainTFArgs, spec_params)
from volcano_pipelines.steps._train_spec import param_for
from volcano_pipelines.interface.params import declared, params
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, Storage

SPEC_TYPES = {"job": JobOptions, "code": CodeSource, "storage": Storage}


def _pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [task["template"]["spec"] for task in job["spec"]["tasks"]]


def test_every_declared_spec_path_is_a_field_of_the_spec() -> None:
    for path, name in spec_params().items():
        group, _, field = path.partition(".")
        if group in SPEC_TYPES:
            assert field in {f.name for f in dataclasses.fields(SPEC_TYPES[group])}, path
        assert param_for(path) == name
    assert param_for("worker.resources.cpu") == "cpu[worker]"
    assert param_for("job.ttl") == "ttl"  # the spec field is named like the argument


def test_job_option_fields_are_named_like_their_arguments() -> None:
    for path, name in spec_params().items():
        if path.startswith("job.") and path.count(".") == 1:
            assert path == f"job.{name}", path


def test_signatures_and_docstrings_come_from_the_declarations() -> None:
    names = [name for name, _, _, _ in declared(*ALL_GROUPS)]
    for step in (render_tf, render_mpi, train_tf, train_mpi):
        taken = {p.name: p for p in params(step)}
        assert all(p.help for p in taken.values()), step.__name__
        # Run's connection group is spread into its fields (kubeconfig, context).
        assert set(taken) <= {"name", *names, *(n for n, _, _, _ in declared(Run, Connection))}
    assert inspect.signature(render_tf).parameters["workers"].default == 1
    assert inspect.signature(render_mpi).parameters["workers"].default == 2
    mpi_help = {p.name: p.help for p in params(render_mpi)}
    assert "mpiworker" in mpi_help["env"] and "every task" in mpi_help["data_pvc"]


def test_each_train_steps_keyword_dict_names_its_declared_parameters() -> None:
    """`**job: Unpack[...]` is what an editor and mypy read; `declare` is what runs: the two agree
    name for name and type for type (a field added to a group and not to its dict fails here)."""
    for step, keywords in ((render_tf, RenderTFArgs), (render_mpi, RenderMPIArgs), (train_tf, TrainTFArgs),
                           (train_mpi, TrainMPIArgs)):
        hints = typing.get_type_hints(step)
        declared_here = {name: hints[name] for name in inspect.signature(step).parameters
                         if name not in ("name", "progress")}
        assert typing.get_type_hints(keywords) == declared_here, step.__name__
    assert typing.get_type_hints(TrainTFArgs)["namespace"] == str | None  # Run's, not the render step's
    assert "job" not in typing.get_type_hints(train_tf)


def test_unknown_argument_is_an_input_error_naming_it() -> None:
    with pytest.raises(InputError) as caught:
        render_tf("x", wokers=2)
    assert caught.value.field == "wokers"
    with pytest.raises(InputError) as caught:
        train_tf("x", wokers=2, dry_run=True)
    assert caught.value.field == "wokers"


# --- the option added through the declarations: deadline --------------------------------------

@pytest.mark.parametrize("render, extra", [(render_tf, {}), (render_mpi, {"command": ["python", "t.py"]})])
def test_deadline_bounds_every_pod(render: Any, extra: dict[str, Any]) -> None:
    assert all("activeDeadlineSeconds" not in pod for pod in _pods(render("x", **extra)))
    assert {pod["activeDeadlineSeconds"] for pod in _pods(render("x", deadline=600, **extra))} == {600}


@pytest.mark.parametrize("value", [0, -5, True, "600"])
def test_deadline_must_be_positive_seconds(value: Any) -> None:
    with pytest.raises(InputError) as caught:
        render_tf("x", deadline=value)
    assert caught.value.field == "deadline"


def test_deadline_reaches_the_cli_and_the_front_ends(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "mpi", "--name", "x", "--deadline", "60", "--", "python", "t.py"]) == 0
    assert "activeDeadlineSeconds: 60" in capsys.readouterr().out
    assert main(["render", "tf", "--name", "x", "--deadline", "0"]) == 2
    assert "invalid --deadline=0" in capsys.readouterr().err
    from volcano_pipelines.argo import templates

    assert templates.command(templates.STEPS["train-tf"]).input("deadline").spec == "--deadline"


def test_the_local_backend_refuses_a_deadline_it_cannot_enforce(tmp_path: Any) -> None:
    with pytest.raises(InputError) as caught:
        train_tf("x", backend="local", deadline=60, local_dir=str(tmp_path))
    assert caught.value.field == "deadline"
    assert not any(tmp_path.iterdir())  # nothing created


def test_the_job_options_are_the_spec_fields_themselves_with_one_set_of_defaults() -> None:
    """JobOptions is `name` plus the declared JobTarget and JobPolicy (volcano/spec.py): a train
    step's default for each is the spec's, because it is read from the same field."""
    from volcano_pipelines.volcano.spec import JobPolicy, JobTarget

    spec_defaults = {f.name: f.default for f in dataclasses.fields(JobOptions) if f.name != "name"}
    declared_defaults = {f.name: f.default for group in (JobTarget, JobPolicy) for f in dataclasses.fields(group)}
    assert spec_defaults == declared_defaults
    signature = inspect.signature(render_tf).parameters
    assert {name: signature[name].default for name in declared_defaults} == declared_defaults
    assert JobOptions("mnist", queue="q") == JobOptions(name="mnist", queue="q")  # name stays positional
