"""Every step input of the shipped pipelines, read from the compiled IR that the KFP UI
uploads (pipelines/*.yaml), comes from where it must: the pipeline parameter that mirrors it,
an output of the train task (the job it created, the namespace it resolved), the run id, the
exit handler's final status, or a constant the pipeline fixes. Nothing is wired that this
table does not name, and nothing it names is missing: a mis-wired input (e.g. finish_run's
namespace from the wrong parameter, reap acting on a parameter instead of train's job) fails
here, whatever the Python that built the pipeline looks like."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import needs

needs.module("kfp", "the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")

from volcano_pipelines.kfp import pipelines
from volcano_pipelines.kfp.compile import PIPELINE_FILES

REPO = Path(__file__).resolve().parents[3]
# libyaml's safe loader where PyYAML has it: the same objects, a tenth of the pure-Python parser's CPU.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
RUN_ID = ("constant", "{{$.pipeline_job_uuid}}")
MODEL = "{{$.inputs.parameters['pipelinechannel--model_name']}}"
Source = tuple[str, ...]


def _resolve(value: dict[str, Any], train_task: str) -> Source:
    if "componentInputParameter" in value:
        name = value["componentInputParameter"].removeprefix("pipelinechannel--")
        for key in ("job_name", "job_namespace"):  # a train output passed down into a sub-DAG (dsl.If)
            if name == f"{train_task}-{key}":
                return ("output", train_task, key)
        return ("param", name)
    if "taskOutputParameter" in value:
        out = value["taskOutputParameter"]
        return ("output", out["producerTask"], out["outputParameterKey"])
    if "runtimeValue" in value:
        return ("constant", value["runtimeValue"]["constant"])
    if "taskFinalStatus" in value:
        return ("final_status", value["taskFinalStatus"]["producerTask"])
    raise AssertionError(f"an input wired in a way this test does not know: {value}")


def _wired(spec: dict[str, Any], train_task: str) -> dict[str, dict[str, Source]]:
    """task name -> input -> where it comes from, over every DAG of the IR."""
    out: dict[str, dict[str, Source]] = {}
    dags = [spec["root"], *spec["components"].values()]
    for dag in dags:
        for name, task in ((dag.get("dag") or {}).get("tasks") or {}).items():
            parameters = (task.get("inputs") or {}).get("parameters") or {}
            if task["componentRef"]["name"].startswith(("comp-exit-handler", "comp-condition")):
                continue  # groups: they only pass channels down
            out[name] = {key: _resolve(value, train_task) for key, value in parameters.items()}
    return out


def _expected(kind: str) -> dict[str, dict[str, Source]]:
    train_component = "train_tf" if kind == "tf" else "train_mpi"
    train_task = train_component.replace("_", "-")
    # Each dataset in a directory of its own, named after the model: sync writes there and the
    # training pods mount only that directory of the data PVC.
    # The run id: a sync over copy pods (sync_workers) that the step's retry resumes.
    expected: dict[str, dict[str, Source]] = {"sync": {"dst": ("constant", f"{pipelines.DATA_MOUNT}/{MODEL}"),
                                                       "run_id": RUN_ID},
                                              train_task: {"run_id": RUN_ID, "data_subpath": ("param", "model_name")},
                                              "finish-run": {"run_id": RUN_ID,
                                                             "status": ("final_status", "exit-handler-1")}}
    job, namespace = ("output", train_task, "job_name"), ("output", train_task, "job_namespace")
    after = pipelines.steps_after_training(kind)
    if "reap" in after:
        expected["reap"] = {"job": job, "namespace": namespace}
    expected["tensorboard"] = {"job": job, "namespace": namespace, "run_id": RUN_ID,
                               "name": ("constant", MODEL + pipelines.TENSORBOARD_SUFFIX)}
    if "serve" in after:
        expected["serve"] = {"namespace": namespace, "run_id": RUN_ID, "model_name": ("param", "model_name"),
                             "name": ("constant", MODEL + pipelines.SERVING_SUFFIX)}
    for item in pipelines.inputs_of(kind):
        for component, param in item.feeds:
            task = component.replace("_", "-")
            assert param not in expected.setdefault(task, {}), (task, param)
            expected[task][param] = ("param", item.name)
    return expected


@pytest.mark.parametrize("kind", pipelines.KINDS)
def test_every_step_input_comes_from_where_it_must(kind: str) -> None:
    spec = next(yaml.load_all((REPO / PIPELINE_FILES[kind]).read_text(encoding="utf-8"), Loader=SAFE_LOADER))
    train_task = "train-tf" if kind == "tf" else "train-mpi"
    wired = _wired(spec, train_task)
    expected = _expected(kind)
    assert sorted(wired) == sorted(expected)
    for task, inputs in expected.items():
        # Extra channel inputs KFP adds for f-strings (pipelinechannel--model_name) are not step inputs.
        got = {key: source for key, source in wired[task].items() if not key.startswith("pipelinechannel--")}
        assert got == inputs, task
        # ...and each of those channels is the pipeline parameter of its name.
        for key, source in wired[task].items():
            if key.startswith("pipelinechannel--"):
                assert source == ("param", key.removeprefix("pipelinechannel--")), (task, key, source)
    # The parameters the IR declares are exactly the pipeline's inputs.
    assert set(spec["root"]["inputDefinitions"]["parameters"]) == {i.name for i in pipelines.inputs_of(kind)}
