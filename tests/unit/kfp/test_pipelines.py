"""The train-and-serve pipelines: parameters mirror the steps', the wiring (run identity,
exit handler, data PVC, no caching, retries) is what the compiled IR says."""

from __future__ import annotations

from typing import Any

import pytest

from tests import needs
import yaml

needs.module("kfp", "the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")

from tests.helpers.renders import kfp_pipeline
from volcano_pipelines.kfp import pipelines
from volcano_pipelines.kfp.compile import compile_text
from volcano_pipelines.kfp.generate import kfp_default, kfp_type
from volcano_pipelines.kfp.platform import StepPod
from volcano_pipelines.kfp.runtime import step_function
from volcano_pipelines.kfp.specs import COMPONENTS
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps.pipelines import shared_defaults

RUN_ID = "{{$.pipeline_job_uuid}}"


def _compiled(kind: str, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    # With every default: the session's one compilation of that pipeline (tests/helpers/renders.py).
    text = compile_text(pipelines.train_and_serve(kind, **kwargs)) if kwargs else kfp_pipeline(kind)
    # libyaml's safe loader: the same objects, a tenth of the pure-Python parser's CPU.
    docs = list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
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
        if item.switch:
            assert given[item.name]["defaultValue"] is True and given[item.name]["parameterType"] == "BOOLEAN"
            continue
        component, name = item.feeds[0]
        param = next(p for p in params(step_function(COMPONENTS[component].step)) if p.name == name)
        base, _ = kfp_type(param.hint)
        definition = given[item.name]
        shared = shared_defaults(COMPONENTS[component].step)
        if name in shared and item.default is None:  # the pipelines' shared default (steps/pipelines.py)
            assert definition["defaultValue"] == kfp_default(shared[name], base), item.name
        elif item.required or param.required:
            assert "defaultValue" not in definition and not definition.get("isOptional"), item.name
        elif item.default is not None:  # the pipeline's own default (the training timeout)
            assert definition["defaultValue"] == kfp_default(item.default, base), item.name
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
    after = pipelines.steps_after_training(kind)
    assert after == {"tf": ("reap", "tensorboard", "serve"), "mpi": ("tensorboard",)}[kind]
    conditions = {"condition-2"} if "serve" in after else set()
    assert set(tasks) == {"exit-handler-1", "finish-run", "sync", train_task, *after, *conditions}
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
    # sync -> train; sync writes into the model's own directory of the data PVC (mounted in its
    # pod), and that directory is all the training pods mount.
    assert tasks[train_task]["dependentTasks"] == ["sync"]
    sync_inputs = tasks["sync"]["inputs"]["parameters"]
    assert sync_inputs["dst"]["runtimeValue"]["constant"] == (
        f"{pipelines.DATA_MOUNT}/{{{{$.inputs.parameters['pipelinechannel--model_name']}}}}")
    assert sync_inputs["pipelinechannel--model_name"]["componentInputParameter"] == "pipelinechannel--model_name"
    assert train_inputs["data_subpath"]["componentInputParameter"] == "pipelinechannel--model_name"
    assert sync_inputs["src"]["componentInputParameter"] == "pipelinechannel--dataset_url"
    mounts = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-sync"]["pvcMount"]
    assert mounts == [{"componentInputParameter": "pipelinechannel--data_pvc", "mountPath": pipelines.DATA_MOUNT,
                       "pvcNameParameter": {"componentInputParameter": "pipelinechannel--data_pvc"}}]
    for name, task in tasks.items():
        if name != "exit-handler-1":
            assert not task.get("cachingOptions", {}).get("enableCache"), f"{name} may be cached"
    for name in ("sync", train_task, *after):
        assert "retryPolicy" not in tasks[name], name  # STEP_RETRIES = 0: KFP would retry final failures too
    _check_lifecycle_chain(spec, tasks, kind, train_task, after)


def _check_lifecycle_chain(spec: dict[str, Any], tasks: dict[str, dict[str, Any]], kind: str, train_task: str,
                           after: tuple[str, ...]) -> None:
    """sync -> train -> reap -> tensorboard -> serve; each acts on the job train created."""
    chain = ["sync", train_task, *after]
    for before, step in zip(chain[1:], chain[2:], strict=False):
        holder = "condition-2" if step == "serve" else step
        assert before in tasks[holder]["dependentTasks"], f"{step} does not run after {before}"
    job = {"taskOutputParameter": {"outputParameterKey": "job_name", "producerTask": train_task}}
    job_namespace = {"taskOutputParameter": {"outputParameterKey": "job_namespace", "producerTask": train_task}}
    for step in after:
        inputs = tasks[step]["inputs"]["parameters"]
        assert inputs["kubeconfig"]["componentInputParameter"] == "pipelinechannel--kubeconfig", step
        if step == "serve":  # inside the condition: train's outputs arrive as the condition's inputs
            assert inputs["namespace"]["componentInputParameter"] == f"pipelinechannel--{train_task}-job_namespace"
        else:
            assert inputs["namespace"] == job_namespace, step
    if "reap" in after:
        assert tasks["reap"]["inputs"]["parameters"]["job"] == job
        assert tasks["reap"]["inputs"]["parameters"]["grace"]["componentInputParameter"] == "pipelinechannel--reap_grace"
    board = tasks["tensorboard"]["inputs"]["parameters"]
    assert board["job"] == job and "ttl" not in board
    assert board["log_pvc"]["componentInputParameter"] == "pipelinechannel--log_pvc"
    assert board["run_id"]["runtimeValue"]["constant"] == RUN_ID
    assert board["name"]["runtimeValue"]["constant"] == \
        "{{$.inputs.parameters['pipelinechannel--model_name']}}" + pipelines.TENSORBOARD_SUFFIX
    if "serve" in after:
        served = tasks["serve"]["inputs"]["parameters"]
        assert served["pvc"]["componentInputParameter"] == "pipelinechannel--log_pvc"
        assert served["model_name"]["componentInputParameter"] == "pipelinechannel--model_name"
        assert served["model_path"]["componentInputParameter"] == "pipelinechannel--serving_model_path"
        condition = tasks["condition-2"]["triggerPolicy"]["condition"]
        assert condition == "inputs.parameter_values['pipelinechannel--serve_model'] == true"
    # Every lifecycle parameter the run form shows is typed, with the step's default.
    given = spec["root"]["inputDefinitions"]["parameters"]
    assert given["log_pvc"]["parameterType"] == "STRING" and given["log_pvc"]["defaultValue"] == "vpipe-logs"
    assert given["tensorboard_timeout"] == {"defaultValue": 300.0, "description": given["tensorboard_timeout"]["description"],
                                            "isOptional": True, "parameterType": "NUMBER_DOUBLE"}
    if kind == "tf":
        assert given["reap_grace"]["defaultValue"] == 30.0 and given["serving_replicas"]["defaultValue"] == 1
        assert given["serving_replicas"]["parameterType"] == "NUMBER_INTEGER"


@pytest.mark.parametrize("kind", pipelines.KINDS)
def test_the_train_and_exit_handler_pods_keep_the_post_mortem_on_the_log_pvc(kind: str) -> None:
    """Issue 30: the steps that save a post-mortem record (train and finish_run) mount the run's
    log PVC (the same `log_pvc` the training pods mount) and copy the record there; no other
    step pod mounts it."""
    from volcano_pipelines.steps.pipelines import LOG_MOUNT, POST_MORTEM_VOLUME_DIR, POST_MORTEM_VOLUME_DIR_ENV

    spec, platform_spec = _compiled(kind)
    train = "exec-train-tf" if kind == "tf" else "exec-train-mpi"
    executors = platform_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    # The exit handler sits outside the exit handler's group: it reads the root's parameter.
    for name, channel in ((train, "pipelinechannel--log_pvc"), ("exec-finish-run", "log_pvc")):
        assert executors[name]["pvcMount"] == [{"componentInputParameter": channel, "mountPath": LOG_MOUNT,
                                                "pvcNameParameter": {"componentInputParameter": channel}}], name
    assert POST_MORTEM_VOLUME_DIR == f"{LOG_MOUNT}/post-mortem"
    mounting = {name for name, e in executors.items() if any(m["mountPath"] == LOG_MOUNT for m in e.get("pvcMount") or [])}
    assert mounting == {train, "exec-finish-run"}
    containers = {name: e["container"] for name, e in spec["deploymentSpec"]["executors"].items()}
    copying = {name for name, c in containers.items()
               if {"name": POST_MORTEM_VOLUME_DIR_ENV, "value": POST_MORTEM_VOLUME_DIR} in (c.get("env") or [])}
    assert copying == {train, "exec-finish-run"}
    # The train task's log_pvc input and its mount are the one pipeline parameter.
    tasks = _tasks(spec)
    assert tasks[train.removeprefix("exec-")]["inputs"]["parameters"]["log_pvc"] == \
        {"componentInputParameter": "pipelinechannel--log_pvc"}


def test_tensorboard_ttl_instead_of_the_job() -> None:
    spec, _ = _compiled("tf", tensorboard_ttl=7200)
    board = _tasks(spec)["tensorboard"]["inputs"]["parameters"]
    assert board["ttl"]["runtimeValue"]["constant"] == 7200.0 and "job" not in board


def test_step_pod_settings_reach_every_step_pod_and_only_them() -> None:
    pod = StepPod(image_pull_secrets=("registry",), node_selector={"pool": "cpu"},
                  tolerations=("dedicated=pipelines:NoSchedule",))
    spec, platform = _compiled("tf", step_pod=pod)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == {"exec-sync", "exec-train-tf", "exec-finish-run", "exec-reap", "exec-tensorboard",
                              "exec-serve"}
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


@pytest.mark.parametrize("kind", pipelines.KINDS)
def test_training_timeout_is_a_run_parameter_with_a_default_and_wired_to_train(kind: str) -> None:
    """Issue 21: a gang that never fits must not keep a run (and, one at a time, every later
    scheduled run) waiting for ever: `timeout` is in the run form, a day unless changed."""
    spec, _ = _compiled(kind)
    train = "train-tf" if kind == "tf" else "train-mpi"
    parameter = spec["root"]["inputDefinitions"]["parameters"]["timeout"]
    assert parameter["defaultValue"] == pipelines.TRAIN_TIMEOUT == 86400.0 and parameter["parameterType"] == "NUMBER_DOUBLE"
    assert _tasks(spec)[train]["inputs"]["parameters"]["timeout"] == {"componentInputParameter": "pipelinechannel--timeout"}
    compiled, _ = _compiled(kind, timeout=3600)  # the compile-time option is the run parameter's default
    assert compiled["root"]["inputDefinitions"]["parameters"]["timeout"]["defaultValue"] == 3600.0


def test_no_task_is_retried_by_kfp_unless_asked() -> None:
    """KFP's retry policy retries any failure, also the final ones (exit 1, 2): off by default."""
    spec, _ = _compiled("tf")
    assert pipelines.STEP_RETRIES == 0
    assert all("retryPolicy" not in task for task in _tasks(spec).values())
    retried, _ = _compiled("tf", step_retries=2)
    assert _tasks(retried)["sync"]["retryPolicy"]["maxRetryCount"] == 2


def test_a_number_that_may_be_none_cannot_be_a_pipeline_parameter() -> None:
    # KFP has no "unset" for numbers in a run form (and kfp.local refuses an optional
    # parameter without a default): such step arguments are compile-time options.
    with pytest.raises(TypeError, match="min_available"):
        pipelines.pipeline_parameter(pipelines.Input("min_available", (("train_tf", "min_available"),)))
    # The training timeout is one only because the pipelines give it a default of their own.
    parameter, _ = pipelines.pipeline_parameter(pipelines.Input("timeout", (("train_tf", "timeout"),)))
    assert parameter.default == 86400.0


@pytest.mark.parametrize("kind", pipelines.KINDS)
def test_kerberos_secret_and_hadoop_conf_reach_the_sync_step_pod_only(kind: str) -> None:
    """Issue 21: Kerberos and HA HDFS from a pipeline: the keytab Secret and the Hadoop
    configuration ConfigMap are volumes of the sync step pod (HADOOP_CONF_DIR points there),
    and the principal and keytab path are run parameters wired to sync."""
    from volcano_pipelines.kfp import platform as step_platform

    pod = step_platform.StepPod(kerberos_secret="hdfs-keytab", hadoop_conf_config_map="hadoop-conf")
    spec, platform_spec = _compiled(kind, step_pod=pod)
    executors = platform_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    sync = executors["exec-sync"]
    assert sync["secretAsVolume"][0]["mountPath"] == step_platform.KERBEROS_MOUNT
    assert sync["secretAsVolume"][0]["secretNameParameter"]["runtimeValue"]["constant"] == "hdfs-keytab"
    assert sync["configMapAsVolume"][0]["mountPath"] == step_platform.HADOOP_CONF_MOUNT
    assert sync["configMapAsVolume"][0]["configMapNameParameter"]["runtimeValue"]["constant"] == "hadoop-conf"
    for name, executor in executors.items():
        if name != "exec-sync":
            assert "secretAsVolume" not in executor and "configMapAsVolume" not in executor, name
    containers = {name: e["container"] for name, e in spec["deploymentSpec"]["executors"].items()}
    assert {"name": "HADOOP_CONF_DIR", "value": step_platform.HADOOP_CONF_MOUNT} in containers["exec-sync"]["env"]
    assert all(e["name"] != "HADOOP_CONF_DIR" for name, c in containers.items() if name != "exec-sync"
               for e in c.get("env") or [])
    sync_task = _tasks(spec)["sync"]["inputs"]["parameters"]
    assert sync_task["kerberos_keytab"] == {"componentInputParameter": "pipelinechannel--kerberos_keytab"}
    assert sync_task["kerberos_principal"] == {"componentInputParameter": "pipelinechannel--kerberos_principal"}
    with pytest.raises(ValueError, match="StepPod.kerberos_secret"):
        step_platform.StepPod(kerberos_secret="Bad_Name")


@pytest.mark.parametrize(("kwargs", "field", "value"), [
    ({"image_pull_secrets": "registry"}, "StepPod.image_pull_secrets", "registry"),
    ({"image_pull_secrets": ("Not_A_Name",)}, "StepPod.image_pull_secrets", "Not_A_Name"),
    ({"tolerations": "k=v:NoSchedule"}, "StepPod.tolerations", "k=v:NoSchedule"),
    ({"tolerations": ("no-effect",)}, "StepPod.tolerations", "no-effect"),
    ({"node_selector": "pool=system"}, "StepPod.node_selector", "pool=system"),
    ({"node_selector": {"pool": 3}}, "StepPod.node_selector", {"pool": 3}),
])
def test_step_pod_refuses_values_of_the_wrong_shape(kwargs: dict, field: str, value: object) -> None:  # type: ignore[type-arg]
    """Issue 33, item 5: a string where a list is meant was split into characters (eight pull
    secrets r, e, g, ...), a string node selector was an AttributeError."""
    from volcano_pipelines.errors import InputError

    with pytest.raises(InputError) as caught:
        StepPod(**kwargs)
    assert (caught.value.field, caught.value.value) == (field, value)


def test_step_pod_takes_lists_as_tuples() -> None:
    pod = StepPod(image_pull_secrets=["registry"], tolerations=["k=v:NoSchedule"])  # type: ignore[arg-type]
    assert pod.image_pull_secrets == ("registry",) and pod.tolerations == ("k=v:NoSchedule",)
