"""The train-and-serve pipelines: parameters mirror the steps', the wiring (run identity,
exit handler, data PVC, no caching, retries) is what the compiled IR says."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

pytest.importorskip("kfp", reason="the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")

from volcano_pipelines.kfp import pipelines
from volcano_pipelines.kfp.compile import compile_text
from volcano_pipelines.kfp.generate import kfp_default, kfp_type
from volcano_pipelines.kfp.platform import StepPod
from volcano_pipelines.kfp.runtime import step_function
from volcano_pipelines.kfp.specs import COMPONENTS
from volcano_pipelines.steps.params import params

RUN_ID = "{{$.pipeline_job_uuid}}"


def _compiled(kind: str, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    docs = list(yaml.safe_load_all(compile_text(pipelines.train_and_serve(kind, **kwargs))))
    return docs[0], (docs[1] if len(docs) > 1 else {})


def _tasks(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    tasks = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        tasks.update((component.get("dag") or {}).get("tasks") or {})
    return tasks


@pytest.mark.parametrize("kind", pipelines.KINDS)
def test_pipeline_parameters_take_the_steps_defaults(kind: str) -> None:
    spec, _ = _compiled(kind)
    given = spec["root"]["inputDefinitions"]["parameters"]
    for item in pipelines.inputs_of(kind):
        component, name = item.feeds[0]
        param = next(p for p in params(step_function(COMPONENTS[component].step)) if p.name == name)
        base, _ = kfp_type(param.annotation)
        definition = given[item.name]
        if item.required or param.required:
            assert "defaultValue" not in definition and not definition.get("isOptional"), item.name
        elif param.default is None:
            # Not set: an empty field in the UI ('' / [] / {}), or no value for a number.
            assert definition.get("defaultValue") in ("", [], {}, None), item.name
        else:
            assert definition["defaultValue"] == kfp_default(param.default, base), item.name
        assert definition.get("description"), f"{item.name} has no help text"


def test_brief_parameters_are_there() -> None:
    names = {item.name for item in pipelines.inputs_of("tf")}
    assert {"dataset_url", "code_url", "image", "workers", "ps", "gpus", "queue", "model_name", "data_pvc"} <= names
    assert {"slots_per_worker", "command"} <= {item.name for item in pipelines.inputs_of("mpi")}


@pytest.mark.parametrize("kind", pipelines.KINDS)
def test_wiring(kind: str) -> None:
    spec, platform = _compiled(kind)
    tasks = _tasks(spec)
    train_task = "train-tf" if kind == "tf" else "train-mpi"
    assert set(tasks) == {"exit-handler-1", "finish-run", "sync", train_task}
    # One run identity for the job and the exit handler: the KFP run id.
    train_inputs = tasks[train_task]["inputs"]["parameters"]
    assert train_inputs["run_id"]["runtimeValue"]["constant"] == RUN_ID
    assert tasks["finish-run"]["inputs"]["parameters"]["run_id"]["runtimeValue"]["constant"] == RUN_ID
    assert train_inputs["name"]["componentInputParameter"] == "pipelinechannel--model_name"
    assert train_inputs["data_pvc"]["componentInputParameter"] == "pipelinechannel--data_pvc"
    # The exit handler sees how the group ended and runs whatever happened.
    finish = tasks["finish-run"]
    assert finish["inputs"]["parameters"]["status"]["taskFinalStatus"]["producerTask"] == "exit-handler-1"
    assert finish["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    # sync -> train; sync writes where the data PVC is mounted in its pod.
    assert tasks[train_task]["dependentTasks"] == ["sync"]
    sync_inputs = tasks["sync"]["inputs"]["parameters"]
    assert sync_inputs["dst"]["runtimeValue"]["constant"] == pipelines.DATA_MOUNT
    assert sync_inputs["src"]["componentInputParameter"] == "pipelinechannel--dataset_url"
    mounts = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-sync"]["pvcMount"]
    assert mounts == [{"componentInputParameter": "pipelinechannel--data_pvc", "mountPath": pipelines.DATA_MOUNT,
                       "pvcNameParameter": {"componentInputParameter": "pipelinechannel--data_pvc"}}]
    for name, task in tasks.items():
        if name != "exit-handler-1":
            assert not task.get("cachingOptions", {}).get("enableCache"), f"{name} may be cached"
    for name in ("sync", train_task):
        assert tasks[name]["retryPolicy"]["maxRetryCount"] == pipelines.STEP_RETRIES


def test_step_pod_settings_reach_every_step_pod_and_only_them() -> None:
    pod = StepPod(image_pull_secrets=("registry",), node_selector={"pool": "cpu"},
                  tolerations=("dedicated=pipelines:NoSchedule",))
    spec, platform = _compiled("tf", step_pod=pod)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == {"exec-sync", "exec-train-tf", "exec-finish-run"}
    for name, executor in executors.items():
        assert executor["imagePullSecret"][0]["secretName"] == "registry", name
        assert executor["nodeSelector"]["labels"] == {"pool": "cpu"}, name
        assert executor["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "pipelines",
                                            "effect": "NoSchedule"}], name
    # The training pods are not the step pods: their settings are the step's inputs.
    train_inputs = _tasks(spec)["train-tf"]["inputs"]["parameters"]
    assert train_inputs["node_selector"]["componentInputParameter"] == "pipelinechannel--node_selector"
    assert train_inputs["image_pull_secrets"]["componentInputParameter"] == "pipelinechannel--image_pull_secrets"


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="tf, mpi"):
        pipelines.train_and_serve("horovod")


def test_compile_time_options_timeout_and_step_retries() -> None:
    spec, _ = _compiled("tf", timeout=3600, step_retries=0)
    tasks = _tasks(spec)
    assert tasks["train-tf"]["inputs"]["parameters"]["timeout"]["runtimeValue"]["constant"] == 3600.0
    assert "retryPolicy" not in tasks["train-tf"] and "retryPolicy" not in tasks["sync"]
    default, _ = _compiled("tf")
    assert "timeout" not in _tasks(default)["train-tf"]["inputs"]["parameters"]
    assert "timeout" not in default["root"]["inputDefinitions"]["parameters"]


def test_a_number_that_may_be_none_cannot_be_a_pipeline_parameter() -> None:
    # KFP has no "unset" for numbers in a run form (and kfp.local refuses an optional
    # parameter without a default): such step arguments are compile-time options.
    with pytest.raises(TypeError, match="timeout"):
        pipelines.pipeline_parameter(pipelines.Input("timeout", (("train_tf", "timeout"),)))
