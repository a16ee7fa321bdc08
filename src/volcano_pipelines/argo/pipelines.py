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
    PART_OF,
    SERVICE_ACCOUNT,
    STEPS,
    WORKFLOW_OWNER,
    command,
    parameter_value,
)
from volcano_pipelines.images import RUNTIME_IMAGE
from volcano_pipelines.labels import RUN_LABEL
from volcano_pipelines.steps.pipelines import (
    DATA_MOUNT,
    DEADLINE_SECONDS,
    JOB,
    JOB_NAMESPACE,
    LEFT_OUT,
    SERVE_SWITCH,
    RunInput,
    Wire,
    run_inputs,
    shared_defaults,
    spelled,
    wiring,
)
from volcano_pipelines.steps.pipelines import (
    PIPELINES as SHAPES,
)

__all__ = ["ARGO_WIRED", "PIPELINES", "PIPELINE_OUTPUTS", "Pipeline", "train_and_serve"]

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

# What the wired values of steps/pipelines.py read, in Argo: the job train created (its `name`
# output) and its namespace, the workflow's (the train templates run the job there: TRAIN_FIXED).
TRAIN_JOB = tag("tasks.train.outputs.parameters.name")
_TRAIN_REPORTS = {JOB: TRAIN_JOB, JOB_NAMESPACE: "{{workflow.namespace}}"}
# Arguments only Argo gives: the Workflow owns TensorBoard's objects (deleted with it).
ARGO_WIRED = {"tensorboard": {"owner": WORKFLOW_OWNER}}


def _dashes(name: str) -> str:
    return name.replace("_", "-")


def _wired(wire: Wire, inputs: dict[str, RunInput]) -> str:
    """A wired argument's value: a run input's workflow parameter (named after the step
    parameter it feeds first), or what train reports about its job."""
    if wire.source in _TRAIN_REPORTS:
        value = _TRAIN_REPORTS[wire.source]
    else:
        value = tag(f"workflow.parameters.{_dashes(spelled(*inputs[wire.source].feeds[0]))}")
    if wire.under_data_mount:
        return f"{DATA_MOUNT}/{value}"
    return value + wire.suffix


def _wiring(kind: str) -> tuple[list[Input], dict[str, dict[str, str]]]:
    """Workflow parameters and each task's arguments, from steps/pipelines.py's wiring: a step's
    wired arguments first, then every parameter of its template that is neither wired nor left
    out, as a workflow parameter <prefix><parameter> with the pipelines' shared default where
    there is one (else the template's)."""
    inputs = {item.name: item for item in run_inputs(kind)}
    workflow: list[Input] = []
    arguments: dict[str, dict[str, str]] = {}
    for step in wiring(kind):
        template_name = PIPELINES[kind].train if step.step == "train" else step.step
        args = {_dashes(wire.param): _wired(wire, inputs) for wire in step.wired}
        args.update(ARGO_WIRED.get(step.step, {}))
        left_out = {_dashes(name) for name in step.left_out | LEFT_OUT}
        shared = {_dashes(name): str(value) for name, value in shared_defaults(step.step).items()}
        for item in command(STEPS[template_name]).inputs:
            if item.name in args or item.name in left_out:
                continue
            name = _dashes(step.prefix) + item.name
            workflow.append(Input(name, item.spec, shared.get(item.name, item.default), item.description, item.enum))
            args[item.name] = tag(f"workflow.parameters.{name}")
        arguments[step.step] = args
    if "serve" in arguments:
        # The serve switch: a pipeline-only on/off (the serve task's `when`), true by default.
        workflow.append(Input(_dashes(SERVE_SWITCH.name), "", "true", SERVE_SWITCH.help, ("true", "false")))
    return workflow, arguments


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


def _arguments(values: dict[str, str]) -> Arguments:
    return Arguments(parameters=[ParameterModel(name=k, value=v) for k, v in values.items()])


@dataclass(frozen=True)
class Pipeline:
    name: str  # the WorkflowTemplate's name
    train: str  # the train step's template
    after: tuple[str, ...]  # the lifecycle steps after training, in order


# The pipelines, described once for both front ends (steps/pipelines.py).
PIPELINES = {kind: Pipeline(f"vpipe-{shape.name}", shape.train.replace("_", "-"), shape.after)
             for kind, shape in SHAPES.items()}


def train_and_serve(runtime_image: str = RUNTIME_IMAGE, kind: str = "tf") -> WorkflowTemplate:
    """tf: sync -> train (TF) -> reap -> tensorboard -> serve (unless serve-model is false);
    mpi: sync -> train (MPI) -> tensorboard. The exit handler reports the workflow's end and,
    unless it succeeded, deletes the Volcano Jobs of this run (a step killed without its
    SIGTERM handler, e.g. a lost node, leaves its parameter servers or workers running)."""
    pipeline = PIPELINES[kind]
    workflow_inputs, arguments = _wiring(kind)
    tasks = [
        DAGTask(name="sync", template_ref=TemplateRef(name="vpipe-sync", template="sync"),
                arguments=_arguments(arguments["sync"])),
        DAGTask(name="train", depends="sync",
                template_ref=TemplateRef(name=f"vpipe-{pipeline.train}", template=pipeline.train),
                arguments=_arguments(arguments["train"])),
    ]
    previous = "train"
    for template_name in pipeline.after:
        when = f"{{{{workflow.parameters.{_dashes(SERVE_SWITCH.name)}}}}} == true" if template_name == "serve" else None
        tasks.append(DAGTask(name=template_name, depends=previous, when=when,
                             template_ref=TemplateRef(name=f"vpipe-{template_name}", template=template_name),
                             arguments=_arguments(arguments[template_name])))
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
