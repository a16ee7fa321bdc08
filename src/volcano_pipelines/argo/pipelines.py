"""The Argo Workflows pipelines, built with Hera from the step templates (argo/templates.py)
and the one description of each pipeline's shape (steps/pipelines.py, shared with KFP):
`train-and-serve` (sync -> train -> reap -> tensorboard -> serve, with an exit handler) and
its MPI form. Thin: every parameter, default and help text comes from the step signatures
(argo/inputs.py); see docs/argo.md."""

from __future__ import annotations

from dataclasses import dataclass

from hera.workflows import Container, Resource, Step, Steps, WorkflowTemplate
from hera.workflows.models import (
    Arguments,
    DAGTask,
    DAGTemplate,
    Outputs,
    TemplateRef,
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

from volcano_pipelines.argo.inputs import Input, tag
from volcano_pipelines.argo.pods import CONTAINER_SECURITY, POD_GC, POD_METADATA, POD_SECURITY, TTL, log_volume, resources
from volcano_pipelines.argo.templates import (
    DATA_MOUNT,
    PART_OF,
    PIPELINE_DEFAULTS,
    SERVICE_ACCOUNT,
    STEPS,
    WORKFLOW_OWNER,
    command,
    parameter_value,
)
from volcano_pipelines.images import RUNTIME_IMAGE
from volcano_pipelines.labels import RUN_LABEL
from volcano_pipelines.steps.pipelines import DEADLINE_SECONDS, PIPELINES as SHAPES, shared_defaults

__all__ = ["LIFECYCLE", "PIPELINES", "PIPELINE_OUTPUTS", "Pipeline", "train_and_serve"]

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
        arguments=[parameter_value(i) for i in workflow_inputs],
        # The train template's log volume: the run's log PVC (argo/pods.py LOG_MOUNTS).
        volumes=[log_volume("{{workflow.parameters.log-pvc}}")],
        templates=[main, exit_handler, report, cleanup],
    )
