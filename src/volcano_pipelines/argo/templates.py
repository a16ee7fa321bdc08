"""The Argo Workflows front end, built with Hera: one WorkflowTemplate per step (a container
running `vpipe <command> ... --json` in the runtime image), the `train-and-serve` pipeline
(sync -> train -> reap -> tensorboard -> serve, with an exit handler) and the nightly CronWorkflow. Thin: every parameter,
default and help text comes from the step signatures (argo/inputs.py); see docs/argo.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hera.workflows import (
    Container,
    CronWorkflow,
    Parameter,
    Resource,
    RetryStrategy,
    Step,
    Steps,
    WorkflowTemplate,
)
from hera.workflows.models import (
    Arguments,
    Backoff,
    DAGTask,
    DAGTemplate,
    IntOrString,
    Outputs,
    PersistentVolumeClaimVolumeSource,
    Quantity,
    ResourceRequirements,
    TemplateRef,
    Volume,
    VolumeMount,
    WorkflowTemplateRef,
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

from volcano_pipelines.argo.inputs import (
    Input,
    StepCommand,
    output_names,
    step_command,
    tag,
)
from volcano_pipelines.images import RUNTIME_IMAGE
from volcano_pipelines.labels import RUN_LABEL
from volcano_pipelines.steps.registry import ARGO, steps_for

__all__ = [
    "DEADLINE_MARGIN_SECONDS",
    "RUNTIME_IMAGE",
    "SERVICE_ACCOUNT",
    "STEPS",
    "nightly_retrain",
    "step_template",
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
# Exit code 3 is a cluster / remote-system problem (unreachable API server, NameNode): worth
# another try, and safe, because a retried step attaches to the job of its run
# ({{workflow.uid}}) and sync is incremental. 1 (the work failed) and 2 (bad input) are final.
RETRY = RetryStrategy(limit="3", retry_policy="OnFailure", expression="asInt(lastRetry.exitCode) == 3",
                      backoff=Backoff(duration="30s", factor=IntOrString(root="2")))
# What manifests/ creates: the defaults of the pipeline's wiring.
PIPELINE_DEFAULTS = {"data-pvc": "vpipe-data", "log-pvc": "vpipe-logs", "queue": "vpipe"}

# The container's only program: turns SPEC VALUE pairs (argo/inputs.py) into vpipe's argv,
# runs it with the JSON result in a file, and writes one file per output parameter. A
# constant: parameter values reach it only as "$@" words and are never parsed as shell.
RUN_SCRIPT = r"""set -u
out=${VPIPE_ARGO_OUT:-/tmp/vpipe}
mkdir -p "$out/outputs"
n=$(($# / 2))
while [ "$n" -gt 0 ]; do
  spec=$1 value=$2
  shift 2
  n=$((n - 1))
  case $spec in
    .) set -- "$@" "$value" ;;
    _) [ -z "$value" ] || set -- "$@" "$value" ;;
    '?'* | '!'*)
      case $value in
        true | false) ;;
        *) printf 'vpipe: error: invalid %s=%s: true or false\n' "${spec#?}" "$value" >&2; exit 2 ;;
      esac
      if { [ "${spec%"${spec#?}"}" = '?' ] && [ "$value" = true ]; } ||
         { [ "${spec%"${spec#?}"}" = '!' ] && [ "$value" = false ]; }; then
        set -- "$@" "${spec#?}"
      fi ;;
    '*'* | +)
      while IFS= read -r line; do
        [ -n "$line" ] || continue
        if [ "$spec" = + ]; then set -- "$@" "$line"; else set -- "$@" "${spec#?}" "$line"; fi
      done <<EOF
$value
EOF
      ;;
    *) [ -z "$value" ] || set -- "$@" "$spec" "$value" ;;
  esac
done
vpipe "$@" > "$out/result.json"
code=$?
cat "$out/result.json"
python3 -m volcano_pipelines.argo.outputs "$out/result.json" "$out/outputs"
exit "$code"
"""

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
    requests: tuple[tuple[str, str], ...] = (("cpu", "100m"), ("memory", "256Mi"))


# What only Argo needs to know about a step, by registry name (steps/registry.py): a train step
# and reap need a timeout (Argo needs a finite activeDeadlineSeconds: timeout + margin; reap
# waits for its job, a sweep runs until stopped); sync writes into the data PVC.
_ARGO_OPTIONS: dict[str, dict[str, Any]] = {
    "sync": {"mounts_data": True, "requests": (("cpu", "1"), ("memory", "1Gi"))},
    "train_tf": {"required": ("timeout",)},
    "train_mpi": {"required": ("timeout",)},
    "reap": {"required": ("timeout",)},
}


def _steps() -> dict[str, StepSpec]:
    """One template per Argo step of the registry, named after its `vpipe` words."""
    return {
        item.template: StepSpec(item.template, item.function(), item.words, positional=item.positional,
                                tasks=item.tasks, **_ARGO_OPTIONS.get(item.name, {}))
        for item in steps_for(ARGO)
    }


STEPS = _steps()
DATA_PVC_INPUT = Input("data-pvc", "", PIPELINE_DEFAULTS["data-pvc"],
                       f"PVC mounted at {DATA_MOUNT} in the sync pod: dst is a directory under {DATA_MOUNT}")


def command(spec: StepSpec) -> StepCommand:
    return step_command(spec.step, spec.words, positional=spec.positional, tasks=spec.tasks, required=spec.required)


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
    deadline = None
    if "timeout" in {i.name for i in cmd.inputs}:
        deadline = tag(f"=asInt(inputs.parameters.timeout) + {DEADLINE_MARGIN_SECONDS}")
    outputs = [Parameter(name="result", value_from=ValueFromModel(path=f"{OUT_DIR}/result.json", default=""),
                         description="the step's result as JSON (vpipe --json)")]
    outputs += [Parameter(name=name, value_from=ValueFromModel(path=f"{OUT_DIR}/outputs/{name}", default=""))
                for name in output_names(spec.step)]
    return Container(
        name=spec.template,
        image=runtime_image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c", RUN_SCRIPT, "vpipe-argo"],
        args=cmd.args(),
        inputs=inputs,
        outputs=outputs,
        active_deadline_seconds=deadline,
        retry_strategy=RETRY,
        resources=_resources(dict(spec.requests)),
        **mounts,
    )


def _resources(requests: dict[str, str]) -> ResourceRequirements:
    """Requests, and memory's as the limit (CPU is not limited: a CPU limit throttles)."""
    return ResourceRequirements(requests={k: Quantity(root=v) for k, v in requests.items()},
                                limits={"memory": Quantity(root=requests["memory"])})


def step_workflow_template(spec: StepSpec, runtime_image: str = RUNTIME_IMAGE) -> WorkflowTemplate:
    """`argo submit --from workflowtemplate/vpipe-<step> -p ...` runs one step; pipelines
    reference its template with templateRef."""
    cmd = command(spec)
    inputs = [*cmd.inputs, DATA_PVC_INPUT] if spec.mounts_data else list(cmd.inputs)
    return WorkflowTemplate(
        name=f"vpipe-{spec.template}",
        labels=PART_OF,
        entrypoint=spec.template,
        service_account_name=SERVICE_ACCOUNT,
        # Submitted on its own, the workflow's arguments feed the entrypoint's inputs by name.
        arguments=[_parameter_value(i) for i in inputs],
        templates=[step_template(spec, runtime_image)],
    )


# --- train-and-serve ---------------------------------------------------------------------------

SYNC_PREFIX = "sync-"


def _pipeline_wiring() -> tuple[list[Input], dict[str, str], dict[str, str]]:
    """Workflow parameters (train's unprefixed, sync's prefixed `sync-`), and the arguments
    of the sync and train tasks. Wired, not parameters: sync's dst (the data PVC's mount),
    both steps' data PVC (one `data-pvc`), the job's namespace (the workflow's: its
    ServiceAccount's Role is namespaced)."""
    sync_cmd, train_cmd = command(STEPS["sync"]), command(STEPS["train-tf"])
    workflow: list[Input] = []
    sync_args: dict[str, str] = {"dst": DATA_MOUNT, "data-pvc": "{{workflow.parameters.data-pvc}}"}
    for item in sync_cmd.inputs:
        if item.name in sync_args:
            continue
        workflow.append(Input(SYNC_PREFIX + item.name, item.spec, item.default, item.description, item.enum))
        sync_args[item.name] = tag(f"workflow.parameters.{SYNC_PREFIX}{item.name}")
    train_args: dict[str, str] = {"namespace": "{{workflow.namespace}}"}
    for item in train_cmd.inputs:
        if item.name in train_args:
            continue
        default = PIPELINE_DEFAULTS.get(item.name, item.default)
        workflow.append(Input(item.name, item.spec, default, item.description, item.enum))
        train_args[item.name] = tag(f"workflow.parameters.{item.name}")
    return workflow, sync_args, train_args


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
      "namespace": "{{workflow.namespace}}", "job": TRAIN_JOB}, frozenset()),
    ("serve", "serving-",
     {"name": "{{workflow.parameters.name}}-serving", "model-name": "{{workflow.parameters.name}}",
      "pvc": "{{workflow.parameters.log-pvc}}", "namespace": "{{workflow.namespace}}"},
     frozenset({"model-dir-local", "keep-versions"})),
)
# Defaults of lifecycle parameters whose template has none (reap needs a timeout for Argo's deadline).
LIFECYCLE_DEFAULTS = {"reap-timeout": "600"}
SERVE_SWITCH = Input("serve-model", "", "true", "serve the exported model with TF Serving after training "
                     "(false: skip the serve step)", ("true", "false"))


def _lifecycle_wiring() -> tuple[list[Input], dict[str, dict[str, str]]]:
    """Workflow parameters of the lifecycle steps (prefixed per step) and each task's arguments."""
    workflow: list[Input] = []
    arguments: dict[str, dict[str, str]] = {}
    for template_name, prefix, wired, left_out in LIFECYCLE:
        args = dict(wired)
        for item in command(STEPS[template_name]).inputs:
            if item.name in args or item.name in left_out:
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


def train_and_serve(runtime_image: str = RUNTIME_IMAGE) -> WorkflowTemplate:
    """sync -> train (TF) -> reap -> tensorboard -> serve (unless serve-model is false). The
    exit handler reports the workflow's end and, unless it succeeded, deletes the Volcano Jobs
    of this run (a step killed without its SIGTERM handler, e.g. a lost node, leaves its
    parameter servers running)."""
    workflow_inputs, sync_args, train_args = _pipeline_wiring()
    lifecycle_inputs, lifecycle_args = _lifecycle_wiring()
    workflow_inputs += lifecycle_inputs
    tasks = [
        DAGTask(name="sync", template_ref=TemplateRef(name="vpipe-sync", template="sync"),
                arguments=_arguments(sync_args)),
        DAGTask(name="train", depends="sync", template_ref=TemplateRef(name="vpipe-train-tf", template="train-tf"),
                arguments=_arguments(train_args)),
    ]
    previous = "train"
    for template_name, _prefix, _wired, _left_out in LIFECYCLE:
        when = f"{{{{workflow.parameters.{SERVE_SWITCH.name}}}}} == true" if template_name == "serve" else None
        tasks.append(DAGTask(name=template_name, depends=previous, when=when,
                             template_ref=TemplateRef(name=f"vpipe-{template_name}", template=template_name),
                             arguments=_arguments(lifecycle_args[template_name])))
        previous = template_name
    outputs = [
        ParameterModel(name=name, value_from=ValueFromModel(parameter=tag(f"tasks.train.outputs.parameters.{name}")))
        for name in ("result", "phase", "succeeded")
    ]
    main = TemplateModel(name="main", dag=DAGTemplate(tasks=tasks), outputs=Outputs(parameters=outputs))
    report = Container(
        name="report",
        image=runtime_image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c", REPORT_SCRIPT, "vpipe-report"],
        args=["{{workflow.name}}", "{{workflow.status}}", "{{workflow.failures}}", "{{workflow.parameters.name}}",
              "{{workflow.namespace}}"],
        resources=_resources({"cpu": "100m", "memory": "256Mi"}),
    )
    cleanup = Resource(
        name="cleanup",
        action="delete",
        # argoexec runs `kubectl delete --ignore-not-found <flags>`: every Volcano Job of this run.
        flags=["jobs.batch.volcano.sh", "--selector", f"{RUN_LABEL}={{{{workflow.uid}}}}",
               "--namespace", "{{workflow.namespace}}"],
    )
    exit_handler = Steps(name="exit-handler", sub_steps=[
        Step(name="report", template="report"),
        Step(name="cleanup", template="cleanup", when="{{workflow.status}} != Succeeded"),
    ])
    return WorkflowTemplate(
        name="vpipe-train-and-serve",
        labels=PART_OF,
        entrypoint="main",
        on_exit="exit-handler",
        service_account_name=SERVICE_ACCOUNT,
        arguments=[_parameter_value(i) for i in workflow_inputs],
        templates=[main, exit_handler, report, cleanup],
    )


def _parameter_value(item: Input) -> Parameter:
    """A workflow argument: `value` is what `argo submit -p` overrides; none means required."""
    extra: dict[str, Any] = {"enum": list(item.enum)} if item.enum else {}
    if item.default is not None:
        extra["value"] = item.default
    return Parameter(name=item.name, description=item.description or None, **extra)


# --- nightly retraining ------------------------------------------------------------------------

NIGHTLY_ARGUMENTS = {
    # An example: edit (or patch with kustomize) before applying.
    "name": "mnist",
    "sync-src": "hdfs://namenode:8020/datasets/mnist",
    "code-url": "http://files.example/mnist/",
    "workers": "2",
    "timeout": "21600",
}


def nightly_retrain() -> CronWorkflow:
    """train-and-serve every night at 02:00 UTC; never two at once; a run missed by more than
    an hour (controller down) is skipped, not started late into the working day."""
    return CronWorkflow(
        name="vpipe-nightly-retrain",
        labels=PART_OF,
        schedules=["0 2 * * *"],
        timezone="Etc/UTC",
        concurrency_policy="Forbid",
        starting_deadline_seconds=3600,
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=3,
        workflow_template_ref=WorkflowTemplateRef(name="vpipe-train-and-serve"),
        arguments=[Parameter(name=k, value=v) for k, v in NIGHTLY_ARGUMENTS.items()],
    )
