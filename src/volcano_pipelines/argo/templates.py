"""The Argo Workflows front end, built with Hera: one WorkflowTemplate per step (a container
running `vpipe <command> ... --json` in the runtime image), the `train-and-serve` pipeline
(sync -> train -> reap -> tensorboard -> serve, with an exit handler) and the nightly CronWorkflow. Thin: every parameter,
default and help text comes from the step signatures (argo/inputs.py); see docs/argo.md."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hera.workflows import (
    Container,
    Parameter,
    Resource,
    Step,
    Steps,
    WorkflowTemplate,
)
from hera.workflows.models import (
    Arguments,
    DAGTask,
    DAGTemplate,
    Outputs,
    PersistentVolumeClaimVolumeSource,
    TemplateRef,
    Volume,
    VolumeMount,
)
from hera.workflows.models import (
    Parameter as ParameterModel,
)
from hera.workflows.models import (
    Template as TemplateModel,
)
from hera.workflows.models import (
    ValueFrom as ValueFromModel,
)

from volcano_pipelines.argo.pods import (
    CONTAINER_SECURITY,
    LOG_MOUNTS,
    POD_METADATA,
    POD_GC,
    POD_NAME,
    POD_SECURITY,
    POST_MORTEM_COPY,
    RETRY,
    RUN_COMMAND,
    TTL,
    log_volume,
    resources,
)
from volcano_pipelines.argo.inputs import (
    Input,
    StepCommand,
    output_names,
    step_command,
    tag,
)
from volcano_pipelines.images import RUNTIME_IMAGE
from volcano_pipelines.labels import RUN_LABEL
from volcano_pipelines.steps.pipelines import DEADLINE_SECONDS, LOG_MOUNT_STEPS, PIPELINES as SHAPES, shared_defaults
from volcano_pipelines.steps.registry import ARGO, steps_for

__all__ = [
    "DEADLINE_MARGIN_SECONDS",
    "RUNTIME_IMAGE",
    "SERVICE_ACCOUNT",
    "STEPS",
    "step_template",
    "nightly_retrain",
    "train_and_serve",
]

SERVICE_ACCOUNT = "vpipe-runner"  # manifests/base
PART_OF = {"app.kubernetes.io/part-of": "volcano-pipelines"}
OUT_DIR = "/tmp/vpipe"  # result.json and outputs/<field> inside the step's container
DATA_MOUNT = "/data"  # where the sync step mounts the data PVC; its dst lies under it
# The train step aborts its job itself when --timeout passes and then needs a moment (API
# calls with retries) to report; Argo's own deadline comes this much later, so Argo never
# kills the step before it has cleaned up.
DEADLINE_MARGIN_SECONDS = 120
# The pipelines' defaults for the train step's parameters (steps/pipelines.py, shared with KFP):
# what manifests/ creates (queue, data and log PVCs) and the training timeout.
PIPELINE_DEFAULTS = {name.replace("_", "-"): str(value) for name, value in shared_defaults("train").items()}
# The train steps run their job in the workflow's namespace (its ServiceAccount's Role is
# namespaced) and make the Workflow its owner: deleting the Workflow deletes the job.
WORKFLOW_OWNER = "argoproj.io/v1alpha1/Workflow/{{workflow.name}}/{{workflow.uid}}"
TRAIN_FIXED = {"namespace": "{{workflow.namespace}}", "owner": WORKFLOW_OWNER, "on_pod_deleted": "keep"}
# A WorkflowTemplate of the pipelines: each one's own deadline (steps/pipelines.py).
PIPELINE_DEADLINE_SECONDS = DEADLINE_SECONDS

# The exit handler's report: the workflow's end, its failed nodes, and the job's last state.
REPORT_SCRIPT = r"""set -u
printf 'workflow %s: %s\n' "$1" "$2"
if [ "$2" != Succeeded ]; then
  printf 'failed nodes: %s\n' "$3"
fi
if [ -n "$4" ]; then
  vpipe status "$4" --namespace "$5" --json || true
fi
"""


@dataclass(frozen=True)
class StepSpec:
    template: str  # template name, also the WorkflowTemplate's name after "vpipe-"
    step: Callable[..., Any]
    words: tuple[str, ...]  # vpipe command words
    required: tuple[str, ...] = ()  # parameters a template needs although the step has a default
    positional: tuple[str, ...] = ()  # parameters given as words (the registry's)
    tasks: tuple[str, ...] = ()  # task names of per-task flags (the registry's)
    mounts_data: bool = False  # the step itself writes into the data PVC
    mounts_logs: bool = False  # the step copies its post-mortem records onto the log volume (argo/pods.py)
    whole_seconds: tuple[str, ...] = ()  # parameters that must be whole seconds (Argo's deadline reads them)
    fixed: tuple[tuple[str, str], ...] = ()  # step parameters the template sets itself (not Argo parameters)
    requests: tuple[tuple[str, str], ...] = (("cpu", "100m"), ("memory", "256Mi"))


# What only Argo needs to know about a step, by registry name (steps/registry.py): a train step
# and reap need a timeout (Argo needs a finite activeDeadlineSeconds: timeout + margin; reap
# waits for its job, a sweep runs until stopped); sync writes into the data PVC.
_TRAIN = {"required": ("timeout",), "whole_seconds": ("timeout",), "fixed": tuple(TRAIN_FIXED.items())}
_ARGO_OPTIONS: dict[str, dict[str, Any]] = {
    "sync": {"mounts_data": True, "requests": (("cpu", "1"), ("memory", "1Gi"))},
    "train_tf": _TRAIN,
    "train_mpi": _TRAIN,
    "reap": {"required": ("timeout",), "whole_seconds": ("timeout",)},
}
# Defaults a template gives where the step's own default does not fit Argo: the queue that
# manifests/ creates (the pipeline's too: PIPELINE_DEFAULTS).
TEMPLATE_DEFAULTS = {"queue": PIPELINE_DEFAULTS["queue"]}


def _steps() -> dict[str, StepSpec]:
    """One template per Argo step of the registry, named after its `vpipe` words."""
    return {
        item.template: StepSpec(item.template, item.function(), item.words, positional=item.positional,
                                tasks=item.tasks, mounts_logs=item.name in LOG_MOUNT_STEPS,
                                **_ARGO_OPTIONS.get(item.name, {}))
        for item in steps_for(ARGO)
    }


STEPS = _steps()
DATA_PVC_INPUT = Input("data-pvc", "", PIPELINE_DEFAULTS["data-pvc"],
                       f"PVC mounted at {DATA_MOUNT} in the sync pod: dst is a directory under {DATA_MOUNT}")


def command(spec: StepSpec) -> StepCommand:
    cmd = step_command(spec.step, spec.words, positional=spec.positional, tasks=spec.tasks, required=spec.required,
                       whole_seconds=spec.whole_seconds, fixed_values=dict(spec.fixed))
    inputs = tuple(dataclasses.replace(i, default=TEMPLATE_DEFAULTS[i.name])
                   if i.name in TEMPLATE_DEFAULTS and i.default is not None else i for i in cmd.inputs)
    return dataclasses.replace(cmd, inputs=inputs)


def _parameter(item: Input) -> Parameter:
    extra: dict[str, Any] = {"enum": list(item.enum)} if item.enum else {}
    if item.default is not None:
        extra["default"] = item.default
    return Parameter(name=item.name, description=item.description or None, **extra)


def step_template(spec: StepSpec, runtime_image: str = RUNTIME_IMAGE) -> Container:
    """The container template of one step, running in `runtime_image`."""
    cmd = command(spec)
    inputs = [_parameter(i) for i in cmd.inputs]
    mounts: dict[str, Any] = {}
    if spec.mounts_data:
        inputs.append(_parameter(DATA_PVC_INPUT))
        mounts = {
            "volumes": [Volume(name="data", persistent_volume_claim=PersistentVolumeClaimVolumeSource(
                claim_name="{{inputs.parameters.data-pvc}}"))],
            "volume_mounts": [VolumeMount(name="data", mount_path=DATA_MOUNT)],
        }
    if spec.mounts_logs:
        mounts.setdefault("volume_mounts", []).extend(LOG_MOUNTS)
    deadline = None
    if "timeout" in spec.whole_seconds:
        deadline = tag(deadline_expression("timeout"))
    outputs = [Parameter(name="result", value_from=ValueFromModel(path=f"{OUT_DIR}/result.json", default=""),
                         description="the step's result as JSON (vpipe --json)")]
    outputs += [Parameter(name=name, value_from=ValueFromModel(path=f"{OUT_DIR}/outputs/{name}", default=""))
                for name in output_names(spec.step)]
    return Container(
        name=spec.template,
        image=runtime_image,
        image_pull_policy="IfNotPresent",
        command=list(RUN_COMMAND),
        args=cmd.args(),
        env=[POD_NAME, POST_MORTEM_COPY] if spec.mounts_logs else [POD_NAME],
        inputs=inputs,
        outputs=outputs,
        active_deadline_seconds=deadline,
        retry_strategy=RETRY,
        resources=resources(dict(spec.requests)),
        pod_security_context=POD_SECURITY,
        security_context=CONTAINER_SECURITY,
        **mounts,
    )


def deadline_expression(parameter: str) -> str:
    """Argo's deadline for a step: the parameter (whole seconds) plus the margin. A value that
    is not whole seconds gives the margin alone, so the expression always resolves (asInt of
    '1.5' would leave it unresolved and fail the pod's creation with a parse error) and the
    step itself refuses the value with exit 2 (argo/run.py's `#` spec)."""
    value = f"inputs.parameters.{parameter}"
    return (f"={value} matches '^[0-9]+$' ? asInt({value}) + {DEADLINE_MARGIN_SECONDS} : "
            f"{DEADLINE_MARGIN_SECONDS}")


def step_workflow_template(spec: StepSpec, runtime_image: str = RUNTIME_IMAGE) -> WorkflowTemplate:
    """`argo submit --from workflowtemplate/vpipe-<step> -p ...` runs one step; pipelines
    reference its template with templateRef."""
    cmd = command(spec)
    inputs = [*cmd.inputs, DATA_PVC_INPUT] if spec.mounts_data else list(cmd.inputs)
    return WorkflowTemplate(
        name=f"vpipe-{spec.template}",
        labels=PART_OF,
        entrypoint=spec.template,
        pod_metadata=POD_METADATA,
        service_account_name=SERVICE_ACCOUNT,
        pod_gc=POD_GC,
        ttl_strategy=TTL,
        # Submitted on its own, the workflow's arguments feed the entrypoint's inputs by name.
        arguments=[_parameter_value(i) for i in inputs],
        volumes=[log_volume(None)] if spec.mounts_logs else None,
        templates=[step_template(spec, runtime_image)],
    )


# --- train-and-serve ---------------------------------------------------------------------------

SYNC_PREFIX = "sync-"


def _pipeline_wiring(train: str) -> tuple[list[Input], dict[str, str], dict[str, str]]:
    """Workflow parameters (train's unprefixed, sync's prefixed `sync-`), and the arguments
    of the sync and `train` (template) tasks. Wired, not parameters: sync's dst and train's
    data-subpath (the dataset's own directory of the data PVC, named after the model: models
    sharing one data PVC never see, overwrite or delete each other's files), both steps' data
    PVC (one `data-pvc`), the job's namespace (the workflow's: its ServiceAccount's Role is
    namespaced)."""
    sync_cmd, train_cmd = command(STEPS["sync"]), command(STEPS[train])
    workflow: list[Input] = []
    sync_args: dict[str, str] = {"dst": f"{DATA_MOUNT}/{{{{workflow.parameters.name}}}}",
                                 "data-pvc": "{{workflow.parameters.data-pvc}}"}
    for item in sync_cmd.inputs:
        if item.name in sync_args or item.name in PIPELINE_LEFT_OUT:
            continue
        workflow.append(Input(SYNC_PREFIX + item.name, item.spec, item.default, item.description, item.enum))
        sync_args[item.name] = tag(f"workflow.parameters.{SYNC_PREFIX}{item.name}")
    # The namespace: the template's own (the workflow's).
    train_args: dict[str, str] = {"data-subpath": "{{workflow.parameters.name}}"}
    for item in train_cmd.inputs:
        if item.name in train_args or item.name in PIPELINE_LEFT_OUT:
            continue
        default = PIPELINE_DEFAULTS.get(item.name, item.default)
        workflow.append(Input(item.name, item.spec, default, item.description, item.enum))
        train_args[item.name] = tag(f"workflow.parameters.{item.name}")
    return workflow, sync_args, train_args


# Step parameters the pipeline leaves at their default, in every step: a dry run of one step
# (the next would fail), a train step or TensorBoard that does not wait (the next step would
# act on a job still running, or a URL not yet serving).
PIPELINE_LEFT_OUT = frozenset({"dry-run", "wait"})

# The steps after training, in order: (template, workflow parameter prefix, wired arguments,
# step parameters the pipeline leaves at their template default). Wired: the job train
# created (its `name` output), the workflow's namespace, the log PVC, object names derived from
# the model name. Left out: what makes reap a sweep (the pipeline reaps one job), and serve's
# local model directory (the serve pod does not mount the PVC).
TRAIN_JOB = tag("tasks.train.outputs.parameters.name")
LIFECYCLE: tuple[tuple[str, str, dict[str, str], frozenset[str]], ...] = (
    ("reap", "reap-", {"job": TRAIN_JOB, "namespace": "{{workflow.namespace}}"},
     frozenset({"selector", "all-namespaces", "group-label", "delete-deployment", "delete-namespace", "once"})),
    ("tensorboard", "tensorboard-",
     {"name": "{{workflow.parameters.name}}-tensorboard", "log-pvc": "{{workflow.parameters.log-pvc}}",
      "namespace": "{{workflow.namespace}}", "job": TRAIN_JOB, "owner": WORKFLOW_OWNER}, frozenset()),
    ("serve", "serving-",
     {"name": "{{workflow.parameters.name}}-serving", "model-name": "{{workflow.parameters.name}}",
      "pvc": "{{workflow.parameters.log-pvc}}", "namespace": "{{workflow.namespace}}"},
     frozenset({"model-dir-local", "keep-versions"})),
)
# The workflow's outputs (its entrypoint's): what a user looks for after a run. name -> (the
# tasks it needs, valueFrom). The parameter servers' linger: reap's when reap ended them, else
# what train measured while Volcano's CompleteJob ended them. served-version: -1 when serve
# was skipped (serve-model false).
def _output(task: str, field: str) -> str:
    return f"tasks.{task}.outputs.parameters['{field}']"


PIPELINE_OUTPUTS: dict[str, tuple[tuple[str, ...], ValueFromModel]] = {
    "result": (("train",), ValueFromModel(parameter=tag("tasks.train.outputs.parameters.result"))),
    "phase": (("train",), ValueFromModel(parameter=tag("tasks.train.outputs.parameters.phase"))),
    "succeeded": (("train",), ValueFromModel(parameter=tag("tasks.train.outputs.parameters.succeeded"))),
    "ps-linger-seconds": (("train", "reap"), ValueFromModel(expression=(
        f"{_output('reap', 'ps-linger-seconds')} != '' ? {_output('reap', 'ps-linger-seconds')} : "
        f"{_output('train', 'ps-linger-seconds')}"))),
    "tensorboard-url": (("tensorboard",), ValueFromModel(parameter=tag("tasks.tensorboard.outputs.parameters.url"))),
    "served-version": (("serve",), ValueFromModel(parameter=tag("tasks.serve.outputs.parameters.version"),
                                                  default="-1")),
}
# Defaults of lifecycle parameters whose template has none (reap needs a timeout for Argo's deadline).
# TensorBoard's Service: ClusterIP (NodePort would publish the logs, unauthenticated, on every
# node's address); reach it with `kubectl port-forward` or an Ingress (tensorboard-ingress-path).
_PREFIX = {"reap": "reap-", "tensorboard": "tensorboard-", "serve": "serving-"}
LIFECYCLE_DEFAULTS = {f"{_PREFIX[step]}{name.replace('_', '-')}": str(value)
                      for step in _PREFIX for name, value in shared_defaults(step).items()}
SERVE_SWITCH = Input("serve-model", "", "true", "serve the exported model with TF Serving after training "
                     "(false: skip the serve step)", ("true", "false"))


def _lifecycle_wiring(steps: tuple[str, ...]) -> tuple[list[Input], dict[str, dict[str, str]]]:
    """Workflow parameters of the lifecycle `steps` (prefixed per step) and each task's arguments."""
    workflow: list[Input] = []
    arguments: dict[str, dict[str, str]] = {}
    for template_name, prefix, wired, left_out in LIFECYCLE:
        if template_name not in steps:
            continue
        args = dict(wired)
        for item in command(STEPS[template_name]).inputs:
            if item.name in args or item.name in left_out or item.name in PIPELINE_LEFT_OUT:
                continue
            name = prefix + item.name
            workflow.append(Input(name, item.spec, LIFECYCLE_DEFAULTS.get(name, item.default), item.description,
                                  item.enum))
            args[item.name] = tag(f"workflow.parameters.{name}")
        arguments[template_name] = args
    if "serve" in arguments:
        workflow.append(SERVE_SWITCH)
    return workflow, arguments


def _arguments(values: dict[str, str]) -> Arguments:
    return Arguments(parameters=[ParameterModel(name=k, value=v) for k, v in values.items()])


@dataclass(frozen=True)
class Pipeline:
    name: str  # the WorkflowTemplate's name
    train: str  # the train step's template
    after: tuple[str, ...]  # the lifecycle steps after training, in LIFECYCLE's order


# The pipelines, described once for both front ends (steps/pipelines.py).
PIPELINES = {kind: Pipeline(f"vpipe-{shape.name}", shape.train.replace("_", "-"), shape.after)
             for kind, shape in SHAPES.items()}


def train_and_serve(runtime_image: str = RUNTIME_IMAGE, kind: str = "tf") -> WorkflowTemplate:
    """tf: sync -> train (TF) -> reap -> tensorboard -> serve (unless serve-model is false);
    mpi: sync -> train (MPI) -> tensorboard. The exit handler reports the workflow's end and,
    unless it succeeded, deletes the Volcano Jobs of this run (a step killed without its
    SIGTERM handler, e.g. a lost node, leaves its parameter servers or workers running)."""
    pipeline = PIPELINES[kind]
    workflow_inputs, sync_args, train_args = _pipeline_wiring(pipeline.train)
    lifecycle_inputs, lifecycle_args = _lifecycle_wiring(pipeline.after)
    workflow_inputs += lifecycle_inputs
    tasks = [
        DAGTask(name="sync", template_ref=TemplateRef(name="vpipe-sync", template="sync"),
                arguments=_arguments(sync_args)),
        DAGTask(name="train", depends="sync",
                template_ref=TemplateRef(name=f"vpipe-{pipeline.train}", template=pipeline.train),
                arguments=_arguments(train_args)),
    ]
    previous = "train"
    for template_name in pipeline.after:
        when = f"{{{{workflow.parameters.{SERVE_SWITCH.name}}}}} == true" if template_name == "serve" else None
        tasks.append(DAGTask(name=template_name, depends=previous, when=when,
                             template_ref=TemplateRef(name=f"vpipe-{template_name}", template=template_name),
                             arguments=_arguments(lifecycle_args[template_name])))
        previous = template_name
    outputs = [ParameterModel(name=name, value_from=value_from) for name, (needs, value_from) in PIPELINE_OUTPUTS.items()
               if set(needs) <= {"train", *pipeline.after}]
    main = TemplateModel(name="main", dag=DAGTemplate(tasks=tasks), outputs=Outputs(parameters=outputs))
    report = Container(
        name="report",
        image=runtime_image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c", REPORT_SCRIPT, "vpipe-report"],
        args=["{{workflow.name}}", "{{workflow.status}}", "{{workflow.failures}}", "{{workflow.parameters.name}}",
              "{{workflow.namespace}}"],
        resources=resources({"cpu": "100m", "memory": "256Mi"}),
        pod_security_context=POD_SECURITY,
        security_context=CONTAINER_SECURITY,
    )
    cleanup = Resource(
        name="cleanup",
        action="delete",
        # argoexec runs `kubectl delete --ignore-not-found <flags>`: every Volcano Job of this run.
        flags=["jobs.batch.volcano.sh", "--selector", f"{RUN_LABEL}={{{{workflow.uid}}}}",
               "--namespace", "{{workflow.namespace}}"],
        pod_security_context=POD_SECURITY,
    )
    exit_handler = Steps(name="exit-handler", sub_steps=[
        Step(name="report", template="report"),
        Step(name="cleanup", template="cleanup", when="{{workflow.status}} != Succeeded"),
    ])
    return WorkflowTemplate(
        name=pipeline.name,
        labels=PART_OF,
        entrypoint="main",
        on_exit="exit-handler",
        # Past it the run fails and the exit handler still runs (a deadline is not a terminate).
        active_deadline_seconds=PIPELINE_DEADLINE_SECONDS,
        pod_metadata=POD_METADATA,
        service_account_name=SERVICE_ACCOUNT,
        pod_gc=POD_GC,
        ttl_strategy=TTL,
        arguments=[_parameter_value(i) for i in workflow_inputs],
        # The train template's log volume: the run's log PVC (argo/pods.py LOG_MOUNTS).
        volumes=[log_volume("{{workflow.parameters.log-pvc}}")],
        templates=[main, exit_handler, report, cleanup],
    )


def _parameter_value(item: Input) -> Parameter:
    """A workflow argument: `value` is what `argo submit -p` overrides; none means required."""
    extra: dict[str, Any] = {"enum": list(item.enum)} if item.enum else {}
    if item.default is not None:
        extra["value"] = item.default
    return Parameter(name=item.name, description=item.description or None, **extra)


def nightly_retrain() -> Any:
    """The nightly CronWorkflow, now built in argo/schedules.py (kept here for callers of this name)."""
    from volcano_pipelines.argo.schedules import nightly_retrain as build

    return build()
