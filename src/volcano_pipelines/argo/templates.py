"""The Argo Workflows front end's step templates, built with Hera: one WorkflowTemplate per
step (a container running `vpipe <command> ... --json` in the runtime image). The pipelines
that chain them are in argo/pipelines.py, the nightly CronWorkflow in argo/schedules.py. Thin:
every parameter, default and help text comes from the step signatures (argo/inputs.py); see
docs/argo.md."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hera.workflows import (
    Container,
    Parameter,
    WorkflowTemplate,
)
from hera.workflows.models import (
    PersistentVolumeClaimVolumeSource,
    Volume,
    VolumeMount,
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
# DATA_MOUNT: where the sync step mounts the data PVC; its dst lies under it (both front ends').
from volcano_pipelines.steps.pipelines import DATA_MOUNT, LOG_MOUNT_STEPS, shared_defaults
from volcano_pipelines.steps.registry import ARGO, steps_for

__all__ = [
    "DEADLINE_MARGIN_SECONDS",
    "RUNTIME_IMAGE",
    "SERVICE_ACCOUNT",
    "STEPS",
    "step_template",
]

SERVICE_ACCOUNT = "vpipe-runner"  # manifests/base
PART_OF = {"app.kubernetes.io/part-of": "volcano-pipelines"}
OUT_DIR = "/tmp/vpipe"  # result.json and outputs/<field> inside the step's container
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
        arguments=[parameter_value(i) for i in inputs],
        volumes=[log_volume(None)] if spec.mounts_logs else None,
        templates=[step_template(spec, runtime_image)],
    )


def parameter_value(item: Input) -> Parameter:
    """A workflow argument: `value` is what `argo submit -p` overrides; none means required."""
    extra: dict[str, Any] = {"enum": list(item.enum)} if item.enum else {}
    if item.default is not None:
        extra["value"] = item.default
    return Parameter(name=item.name, description=item.description or None, **extra)
