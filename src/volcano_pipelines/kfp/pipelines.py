"""The end-to-end pipelines (steps/pipelines.py describes them once for KFP and Argo), rendered
to KFP inside an exit handler that reports and cleans up:

    train-and-serve      sync -> train tf  -> reap -> tensorboard -> serve (serve_model)
    train-and-serve-mpi  sync -> train mpi -> tensorboard

Each pipeline parameter is a run input of steps/pipelines.py and takes its type, default and help
from the step parameter it feeds first (interface/params.py), or the pipelines' shared default where a
shared cluster needs another; the wiring (what each step is given, and from where) is
steps/pipelines.py's too. Only KFP's own means are written here: the exit handler, the volumes,
the serve condition, display names."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from kfp import dsl
from kfp.dsl.graph_component import GraphComponent

from volcano_pipelines.kfp import components, platform
from volcano_pipelines.kfp.generate import kfp_default, kfp_type
from volcano_pipelines.kfp.runtime import step_function
from volcano_pipelines.kfp.specs import COMPONENTS, RUNTIME_IMAGE
from volcano_pipelines.interface.params import Param, params
from volcano_pipelines.steps.pipelines import (
    DATA_MOUNT,
    JOB,
    JOB_NAMESPACE,
    PIPELINES,
    SERVE_SWITCH,
    SERVING_SUFFIX,
    SYNC_DEADLINE_SECONDS,
    TENSORBOARD_SUFFIX,
    RunInput,
    Wire,
    run_inputs,
    shared_defaults,
    wiring,
)

__all__ = ["DATA_MOUNT", "KINDS", "PIPELINE_NAMES", "SERVING_SUFFIX", "TENSORBOARD_SUFFIX", "Input", "inputs_of",
           "pipeline_parameter", "steps_after_training", "train_and_serve"]

# DATA_MOUNT (the sync pod's data PVC mount) and the object names' suffixes are steps/pipelines.py's,
# the same values for both front ends.

# The KFP run id: one identity for every step of a run, so a retried step attaches to the job
# its first attempt created instead of creating a second one.
RUN_ID = dsl.PIPELINE_JOB_ID_PLACEHOLDER
KINDS = tuple(PIPELINES)
PIPELINE_NAMES = {kind: shape.name for kind, shape in PIPELINES.items()}
# KFP's retry policy (PipelineTask.set_retry: a count and a back-off) retries a task on any
# failure and cannot tell exit codes apart, while most of the steps' failures are final (exit 1:
# the job failed, the model was not served; exit 2: bad input), so retrying them wastes the
# back-off and repeats the same report. The transient ones (API server or NameNode blips,
# exit 3) are retried inside each step (k8s/: one retry policy; sync: per file). So no task is
# retried by KFP unless a compile-time `step_retries` asks for it (each retry re-attaches).
STEP_RETRIES = 0
# The training timeout of a run (seconds, from submission): a gang that never fits would keep
# the run Running for ever and, with `vpipe schedule kfp`'s one run at a time, hold back every
# later scheduled run. A day, unless the run form or the compile-time `timeout` says otherwise.
TRAIN_TIMEOUT = float(shared_defaults("train")["timeout"])
_EMPTY: dict[str, Any] = {"str": "", "list": [], "dict": {}}
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict}


# A run parameter (steps/pipelines.py declares each pipeline's, for both front ends).
Input = RunInput
# Help a run form shows only in KFP: where KFP mounts the keytab Secret (platform.py).
_KFP_HELP = {"kerberos_keytab": f"keytab file in the sync step pod: {platform.KERBEROS_MOUNT}/<key> when the pipeline is "
                                "compiled with StepPod(kerberos_secret=...) (docs/kfp.md)"}
_AFTER = {kind: shape.after for kind, shape in PIPELINES.items()}


def inputs_of(kind: str) -> tuple[Input, ...]:
    return tuple(replace(item, help=_KFP_HELP[item.name]) if item.name in _KFP_HELP else item
                 for item in run_inputs(kind))


def steps_after_training(kind: str) -> tuple[str, ...]:
    """The lifecycle steps a pipeline runs after training, in order."""
    return _AFTER[kind]


def _step_params(component: str) -> dict[str, Param]:
    return {p.name: p for p in params(step_function(COMPONENTS[component].step))}


def _step_param(component: str, name: str) -> Param:
    found = _step_params(component)
    if name not in found:
        raise KeyError(f"{COMPONENTS[component].step} has no parameter {name!r}")
    return found[name]


def pipeline_parameter(item: Input) -> tuple[inspect.Parameter, str]:
    """The pipeline parameter for `item` and its help. A step parameter that may be None
    becomes an empty text / list / dict ("not set": runtime.step_arguments turns it back into
    None). A number that may be None cannot be a pipeline parameter: KFP has no "no value"
    for it (kfp.local refuses an optional parameter without a default) and 0 may be a real
    value; such a step argument is a compile-time option of the pipeline (e.g. `min_available`),
    or has a pipeline default of its own (`Input.default`: the training `timeout`)."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if item.switch:
        return inspect.Parameter(item.name, kind, annotation=bool, default=True), item.help
    component, name = item.feeds[0]
    param = _step_param(component, name)
    shared = shared_defaults(COMPONENTS[component].step)
    if name in shared and item.default is None:
        param = replace(param, default=shared[name], required=False)
    base, _ = kfp_type(param.hint)
    help_text = item.help or param.help
    if item.required or param.required:
        return inspect.Parameter(item.name, kind, annotation=_TYPES[base]), help_text
    if item.default is not None:
        return inspect.Parameter(item.name, kind, annotation=_TYPES[base], default=kfp_default(item.default, base)), help_text
    if param.default is None:
        if base not in _EMPTY:
            raise TypeError(f"{item.name}: a {base} whose default is None cannot be a pipeline parameter")
        return inspect.Parameter(item.name, kind, annotation=_TYPES[base], default=_EMPTY[base]), help_text
    return inspect.Parameter(item.name, kind, annotation=_TYPES[base], default=kfp_default(param.default, base)), help_text


def _signature(inputs: tuple[Input, ...]) -> tuple[inspect.Signature, str]:
    built = [pipeline_parameter(item) for item in inputs]
    ordered = [p for p, _ in built if p.default is p.empty] + [p for p, _ in built if p.default is not p.empty]
    doc = "\n".join(f"    {p.name}: {text}" for p, text in built)
    return inspect.Signature(ordered), doc


def _feeding(inputs: tuple[Input, ...], values: Mapping[str, Any], component: str) -> dict[str, Any]:
    return {param: values[item.name] for item in inputs for target, param in item.feeds if target == component}


def _wired(wire: Wire, values: Mapping[str, Any], outputs: Mapping[str, Any], data_mount: str) -> Any:
    """A wired argument's value: a run input as it is (a channel), or an f-string of it (KFP
    fills it in at run time: a placeholder in the IR), or what train reports about its job."""
    value = outputs[wire.source] if wire.source in outputs else values[wire.source]
    if wire.under_data_mount:
        return f"{data_mount}/{value}"
    return f"{value}{wire.suffix}" if wire.suffix else value


# What each step's task is called in the KFP UI.
_DISPLAY = {"sync": "sync dataset", "reap": "reap parameter servers", "tensorboard": "tensorboard",
            "serve": "serve the model"}


def _body(kind: str, inputs: tuple[Input, ...], values: Mapping[str, Any], data_mount: str,
          step_pod: platform.StepPod, fixed: Mapping[str, Any], retries: int, tensorboard_ttl: float | None,
          built: Mapping[str, Any]) -> None:
    train_name = PIPELINES[kind].train
    finish = built["finish_run"](run_id=RUN_ID, **_feeding(inputs, values, "finish_run"))
    finish.set_display_name("report and clean up")
    # Both steps that save a post-mortem record also keep it on the run's log PVC (steps/pipelines.py).
    platform.mount_logs(finish, values["log_pvc"])
    tasks = [finish]
    with dsl.ExitHandler(finish, name=PIPELINE_NAMES[kind]):
        outputs: dict[str, Any] = {}
        previous = None
        for step in wiring(kind):
            component = train_name if step.step == "train" else step.step
            arguments: dict[str, Any] = {}
            for wire in step.wired:
                if step.step == "sync" and wire.param == "data_pvc":
                    continue  # not a parameter of the step: the PVC its pod mounts (below)
                if step.step == "tensorboard" and wire.param == "job" and tensorboard_ttl is not None:
                    # Living for a TTL (the reap sweeper ends it) instead of tied to the training job.
                    arguments["ttl"] = float(tensorboard_ttl)
                    continue
                arguments[wire.param] = _wired(wire, values, outputs, data_mount)
            # The KFP run id: every step that takes one (a retried step attaches to what it started).
            if "run_id" in _step_params(component):
                arguments["run_id"] = RUN_ID
            if step.step == "train":
                arguments.update(fixed)
            arguments.update(_feeding(inputs, values, component))
            if step.step == "serve":
                with dsl.If(values[SERVE_SWITCH.name] == True, name=SERVE_SWITCH.name):  # noqa: E712 - a condition
                    task = built[component](**arguments)
            else:
                task = built[component](**arguments)
            task.set_display_name(f"train ({kind})" if step.step == "train" else _DISPLAY[step.step])
            if step.step == "sync":
                platform.mount_data(task, values["data_pvc"], data_mount)
                # With sync_workers above 1 the step finds the data PVC (and the Kerberos / Hadoop volumes)
                # for its copy pods on its own pod, which it reads by name.
                platform.name_the_pod(task)
                # Bounded: a volume that never attaches or a NameNode that never answers ends the run
                # (SIGTERM at the deadline; the exit handler then runs) instead of stalling it.
                platform.set_deadline(task, SYNC_DEADLINE_SECONDS)
                platform.mount_sync_config(task, step_pod)
            if step.step == "train":
                platform.mount_logs(task, values["log_pvc"])
                # The lifecycle steps act on the job train created: its name and namespace come from
                # train's outputs (the namespace train resolved, also when the parameter was empty).
                outputs = {JOB: task.outputs["job_name"], JOB_NAMESPACE: task.outputs["job_namespace"]}
            if previous is not None:
                task.after(previous)
            tasks.append(task)
            previous = task
        for task in tasks[1:]:
            if retries:
                task.set_retry(num_retries=retries, backoff_duration="30s")
    for task in tasks:
        platform.shape(task, step_pod)
        # Never cached: a cached sync would skip new data, a cached train would skip training,
        # a cached serve would not roll out the new model.
        task.set_caching_options(False)


def train_and_serve(kind: str = "tf", *, data_mount: str = DATA_MOUNT, step_pod: platform.StepPod | None = None,
                    timeout: float | None = None, step_retries: int = STEP_RETRIES,
                    tensorboard_ttl: float | None = None, runtime_image: str = RUNTIME_IMAGE) -> GraphComponent:
    """The pipeline for `kind` (tf or mpi). `data_mount` is where the sync step writes (the
    data PVC's mount point in its pod); tests that run the pipeline locally point it at a
    temporary directory. `step_pod` shapes every step pod (pull secrets, node selector).
    `timeout` (seconds): the default of the run's `timeout` parameter (TRAIN_TIMEOUT when None),
    which bounds the training step: the job is aborted and the run fails.
    `step_retries`: how often a failed step pod is retried (each retry attaches to what the
    first attempt started; reap, tensorboard and serve apply idempotently).
    `tensorboard_ttl` (seconds): TensorBoard lives this long instead of as long as the job.
    `runtime_image`: the image every step runs in (the runtime image pushed to a registry of
    your own; `vpipe compile --runtime-image`)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    inputs = tuple(replace(item, default=float(timeout)) if item.name == "timeout" and timeout is not None else item
                   for item in inputs_of(kind))
    signature, arg_docs = _signature(inputs)
    pod = step_pod or platform.StepPod()
    fixed: dict[str, Any] = {}
    step_components = components.build_all(runtime_image)

    def pipeline_func(*args: Any, **kwargs: Any) -> None:
        bound = signature.bind(*args, **kwargs)  # KFP passes the parameters positionally
        _body(kind, inputs, bound.arguments, data_mount, pod, fixed, step_retries, tensorboard_ttl, step_components)

    train = COMPONENTS["train_tf" if kind == "tf" else "train_mpi"]
    after = {"tf": "Then reap lingering parameter servers, start TensorBoard over the logs and serve the exported "
                   "model with TF Serving. ",
             "mpi": "Then start TensorBoard over the logs. "}[kind]
    description = (f"Stage a dataset into a PVC, then {train.summary[0].lower()}{train.summary[1:]} {after}"
                   "An exit handler reports the run and cleans up its job when the run fails.")
    pipeline_func.__name__ = PIPELINE_NAMES[kind].replace("-", "_")
    pipeline_func.__signature__ = signature  # type: ignore[attr-defined]
    pipeline_func.__doc__ = f"{description}\n\nArgs:\n{arg_docs}\n"
    built: Callable[..., Any] = dsl.pipeline(name=PIPELINE_NAMES[kind], description=description)
    return built(pipeline_func)
