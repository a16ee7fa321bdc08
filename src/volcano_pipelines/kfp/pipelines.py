"""The end-to-end pipelines (steps/pipelines.py describes them once for KFP and Argo), rendered
to KFP inside an exit handler that reports and cleans up:

    train-and-serve      sync -> train tf  -> reap -> tensorboard -> serve (serve_model)
    train-and-serve-mpi  sync -> train mpi -> tensorboard

Each pipeline parameter mirrors one step parameter and takes its type, default and help from
the step's signature (steps/params.py), or the pipelines' shared default where a shared
cluster needs another (steps/pipelines.py); only the wiring is written here."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kfp import dsl
from kfp.dsl.graph_component import GraphComponent

from volcano_pipelines.kfp import components, platform
from volcano_pipelines.kfp.generate import kfp_default, kfp_type
from volcano_pipelines.kfp.runtime import step_function
from volcano_pipelines.kfp.specs import COMPONENTS, RUNTIME_IMAGE
from volcano_pipelines.steps.params import Param, params
from volcano_pipelines.steps.pipelines import PIPELINES, SYNC_DEADLINE_SECONDS, run_parameters, shared_defaults

__all__ = ["DATA_MOUNT", "KINDS", "PIPELINE_NAMES", "SERVING_SUFFIX", "TENSORBOARD_SUFFIX", "Input", "inputs_of",
           "pipeline_parameter", "steps_after_training", "train_and_serve"]

# Where the sync step pod mounts the data PVC. Each dataset is staged into a directory of its
# own, named after the model (<data_pvc>/<model_name>/), which is all the training pods mount:
# two models on one PVC never see, overwrite or (sync_delete) remove each other's files.
DATA_MOUNT = "/data"
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


@dataclass(frozen=True)
class Input:
    """A pipeline parameter: the component parameters it feeds (the first one gives its
    type, default and help), a help text of its own where the step's would mislead, and
    `required` where the pipeline needs a value the step can do without."""

    name: str
    feeds: tuple[tuple[str, str], ...]
    help: str = ""
    required: bool = False
    switch: bool = False  # a pipeline-only on/off (bool, default true) that feeds no step parameter
    default: Any = None  # the pipeline's default where the step's is None (a number KFP cannot leave unset)


_SHAPE = {"train_tf": ("workers", "ps", "args"), "train_mpi": ("workers", "slots_per_worker", "command", "mpiexec_args")}


# What a pipeline names the objects the lifecycle steps create: the model name plus a suffix
# (the training job is named like the model; Volcano gives it a Service of that name too).
TENSORBOARD_SUFFIX = "-tensorboard"
SERVING_SUFFIX = "-serving"
_AFTER = {kind: shape.after for kind, shape in PIPELINES.items()}


def _lifecycle_inputs(kind: str) -> tuple[Input, ...]:
    steps = _AFTER[kind]
    board = (
        Input("tensorboard_logdir", (("tensorboard", "logdir"),),
              "sub-path of the log PVC that TensorBoard reads (default: the PVC's root)"),
        Input("tensorboard_service_type", (("tensorboard", "service_type"),)),
        Input("tensorboard_ingress_path", (("tensorboard", "ingress_path"),)),
        Input("tensorboard_image", (("tensorboard", "image"),)),
        Input("tensorboard_timeout", (("tensorboard", "timeout"),)),
        # Where TensorBoard runs: its log PVC may be reachable only from some nodes (a node-local
        # volume, a storage pool behind a taint), which the training pods' placement does not cover.
        Input("tensorboard_node_selector", (("tensorboard", "node_selector"),)),
        Input("tensorboard_tolerations", (("tensorboard", "tolerations"),)),
        Input("tensorboard_labels", (("tensorboard", "labels"),)),
    )
    reap = (Input("reap_grace", (("reap", "grace"),)),) if "reap" in steps else ()
    serve = (
        Input("serve_model", (), "serve the exported model with TF Serving after training (false: skip the serve step)",
              switch=True),
        Input("serving_model_path", (("serve", "model_path"),),
              "the model's base path on the log PVC, holding numbered versions (default: export/<model_name>)"),
        Input("serving_image", (("serve", "image"),)),
        Input("serving_replicas", (("serve", "replicas"),)),
        Input("serving_cpu", (("serve", "cpu"),)),
        Input("serving_memory", (("serve", "memory"),)),
        Input("serving_version_policy", (("serve", "version_policy"),)),
        Input("serving_smoke_payload", (("serve", "smoke_payload"),)),
        Input("serving_timeout", (("serve", "timeout"),)),
        Input("serving_labels", (("serve", "labels"),)),
    ) if "serve" in steps else ()
    return reap + board + serve


def _train_inputs(train: str, after: tuple[str, ...]) -> tuple[Input, ...]:
    log_pvc = {"tensorboard": ("tensorboard", "log_pvc"), "serve": ("serve", "pvc")}
    return (
        Input("model_name", ((train, "name"),),
              "name of the model; the training job is named after it (DNS label; pods are <name>-<task>-<index>)"),
        Input("dataset_url", (("sync", "src"),),
              "the dataset: hdfs://, viewfs://, webhdfs://, file:// or any fsspec URL"),
        Input("data_pvc", ((train, "data_pvc"),),
              "PVC the dataset is staged into, in its directory <model_name>/; the training pods mount that "
              "directory (read-only) at data_dir"),
        Input("image", ((train, "image"),)),
        Input("timeout", ((train, "timeout"),),
              "seconds the training job may take from submission; then it is aborted and the run fails "
              "(a gang that never fits would otherwise keep the run, and every later scheduled run, waiting)",
              default=TRAIN_TIMEOUT),
        *(Input(name, ((train, name),)) for name in _SHAPE[train] + run_parameters()),
        Input("log_pvc", ((train, "log_pvc"), *(log_pvc[step] for step in after if step in log_pvc)),
              "PVC for logs, checkpoints and the exported model (every training task); TensorBoard reads it"
              + (", TF Serving serves <log_pvc>/export/<model_name>/" if "serve" in after else "")),
        Input("namespace", ((train, "namespace"), ("finish_run", "namespace")),
              "namespace of the training job (empty: the namespace the pipeline runs in)"),
        Input("kubeconfig", ((train, "kubeconfig"), ("finish_run", "kubeconfig"), *((step, "kubeconfig") for step in after)),
              "kubeconfig file in the step pod; empty: the step pod's in-cluster identity (the normal case)"),
        Input("sync_include", (("sync", "include"),), "sync only files matching these globs ('**' crosses directories)"),
        Input("sync_exclude", (("sync", "exclude"),), "skip files matching these globs"),
        Input("sync_delete", (("sync", "delete"),), "remove staged files that are no longer in the dataset"),
        Input("sync_checksum", (("sync", "checksum"),), "compare and verify by content hash, not size + mtime"),
        Input("sync_transfers", (("sync", "transfers"),), "parallel file transfers"),
        Input("sync_workers", (("sync", "workers"),),
              "copy pods: 1, the sync step copies; more, the step plans once and a Volcano Job of that many copy pods "
              "copies, each mounting the data PVC (docs/sync.md)"),
        Input("sync_queue", (("sync", "queue"),), "Volcano queue of the copy pods (sync_workers above 1)"),
        Input("hdfs_user", (("sync", "user"),), "HDFS simple-auth user (empty: $HADOOP_USER_NAME or the pod's user)"),
        Input("kerberos_principal", (("sync", "kerberos_principal"),),
              "Kerberos principal of the sync step (with kerberos_keytab; empty: no Kerberos)"),
        Input("kerberos_keytab", (("sync", "kerberos_keytab"),),
              f"keytab file in the sync step pod: {platform.KERBEROS_MOUNT}/<key> when the pipeline is compiled with "
              "StepPod(kerberos_secret=...) (docs/kfp.md)"),
        Input("on_failure", (("finish_run", "on_failure"),)),
    )


def inputs_of(kind: str) -> tuple[Input, ...]:
    return _train_inputs("train_tf" if kind == "tf" else "train_mpi", _AFTER[kind]) + _lifecycle_inputs(kind)


def steps_after_training(kind: str) -> tuple[str, ...]:
    """The lifecycle steps a pipeline runs after training, in order."""
    return _AFTER[kind]


def _step_param(component: str, name: str) -> Param:
    found = {p.name: p for p in params(step_function(COMPONENTS[component].step))}
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


def _body(kind: str, inputs: tuple[Input, ...], values: Mapping[str, Any], data_mount: str,
          step_pod: platform.StepPod, fixed: Mapping[str, Any], retries: int, tensorboard_ttl: float | None,
          built: Mapping[str, Any]) -> None:
    train_name = "train_tf" if kind == "tf" else "train_mpi"
    finish = built["finish_run"](run_id=RUN_ID, **_feeding(inputs, values, "finish_run"))
    finish.set_display_name("report and clean up")
    # Both steps that save a post-mortem record also keep it on the run's log PVC (steps/pipelines.py).
    platform.mount_logs(finish, values["log_pvc"])
    tasks = [finish]
    with dsl.ExitHandler(finish, name=PIPELINE_NAMES[kind]):
        # An f-string of a pipeline parameter: KFP fills it in at run time (a placeholder in the IR).
        staged = built["sync"](dst=f"{data_mount}/{values['model_name']}", run_id=RUN_ID,
                               **_feeding(inputs, values, "sync"))
        staged.set_display_name("sync dataset")
        platform.mount_data(staged, values["data_pvc"], data_mount)
        # With sync_workers above 1 the step finds the data PVC (and the Kerberos / Hadoop volumes) for
        # its copy pods on its own pod, which it reads by name.
        platform.name_the_pod(staged)
        # Bounded: a volume that never attaches or a NameNode that never answers ends the run
        # (SIGTERM at the deadline; the exit handler then runs) instead of stalling it.
        platform.set_deadline(staged, SYNC_DEADLINE_SECONDS)
        platform.mount_sync_config(staged, step_pod)
        train = built[train_name](run_id=RUN_ID, data_subpath=values["model_name"], **fixed,
                                  **_feeding(inputs, values, train_name))
        train.set_display_name(f"train ({kind})")
        platform.mount_logs(train, values["log_pvc"])
        train.after(staged)
        tasks += [staged, train]
        # The lifecycle steps act on the job train created: its name and namespace come from
        # train's outputs (the namespace train resolved, also when the parameter was empty).
        job, namespace = train.outputs["job_name"], train.outputs["job_namespace"]
        previous = train
        for step in _AFTER[kind]:
            wired: dict[str, Any] = {"namespace": namespace}
            if step == "reap":
                wired["job"] = job
                display = "reap parameter servers"
            elif step == "tensorboard":
                wired.update(name=f"{values['model_name']}{TENSORBOARD_SUFFIX}", run_id=RUN_ID)
                # Tied to the training job (deleted with it), or living for a TTL (the reap sweeper ends it).
                wired.update({"job": job} if tensorboard_ttl is None else {"ttl": float(tensorboard_ttl)})
                display = "tensorboard"
            else:
                wired.update(name=f"{values['model_name']}{SERVING_SUFFIX}", model_name=values["model_name"],
                             run_id=RUN_ID)
                display = "serve the model"
            arguments = {**wired, **_feeding(inputs, values, step)}
            if step == "serve":
                with dsl.If(values["serve_model"] == True, name="serve_model"):  # noqa: E712 - a pipeline condition
                    task = built[step](**arguments)
            else:
                task = built[step](**arguments)
            task.set_display_name(display)
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
