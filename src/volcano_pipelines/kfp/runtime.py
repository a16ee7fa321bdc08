"""What runs inside a KFP step pod: the generated component function hands its inputs here;
this translates them to the step's arguments (KFP's conventions -> Python values), calls the
step, and turns the result into the component's outputs (parameters, a Metrics artifact, a
Markdown summary). No decisions about values: the step checks them."""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from volcano_pipelines.errors import VpipeError, WorkFailed
from volcano_pipelines.kfp import summary as summaries
from volcano_pipelines.kfp.generate import kfp_type
from volcano_pipelines.kfp.specs import COMPONENTS, STEP_FUNCTIONS
from volcano_pipelines.steps.params import params

__all__ = ["outputs_of", "run_step", "step_arguments", "step_function"]

log = logging.getLogger("volcano_pipelines.kfp")
# Steps whose result says `succeeded`; like `vpipe reap|tensorboard|serve`, the step fails when it did not.
LIFECYCLE_STEPS = ("reap", "tensorboard", "serve")


def step_function(step: str) -> Callable[..., Any]:
    module, _, name = STEP_FUNCTIONS[step].partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def _integral(value: Any) -> Any:
    # KFP carries numbers inside dicts as protobuf doubles: 1 may arrive as 1.0.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def step_arguments(fn: Callable[..., Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """KFP input values -> the step's keyword arguments. A field left empty in the KFP UI
    arrives as '', [] or {} (a UI cannot send None): for a parameter whose default is None,
    an empty value means "not set". Integer values inside dicts (e.g. gpus per task) may
    arrive as floats."""
    out: dict[str, Any] = {}
    for param in params(fn):
        if param.name not in arguments:
            continue
        value = arguments[param.name]
        base, _ = kfp_type(param.annotation)
        if not param.required and param.default is None and isinstance(value, (str, list, dict)) and not value:
            value = None
        elif base == "int":
            value = _integral(value)
        elif base == "dict" and isinstance(value, Mapping) and param.annotation.replace(" | None", "").endswith("int]"):
            value = {key: _integral(item) for key, item in value.items()}
        elif base == "list" and isinstance(value, list) and param.annotation.replace(" | None", "").endswith("[int]"):
            value = [_integral(item) for item in value]  # serve's versions
        out[param.name] = value
    return out


def outputs_of(step: str, result: Any) -> dict[str, Any]:
    """A step result -> the component's output parameters, by name."""
    if step == "sync":
        data = result.to_dict()
        data.pop("plan", None)  # a dry run's per-file plan can be huge; the summary has the counts
        return {"copied": result.copied, "bytes_copied": result.bytes_copied, "failed": result.failed, "result": data}
    if step in ("train_tf", "train_mpi"):
        return {
            "job_name": result.name, "job_namespace": result.namespace, "run_id": result.run_id or "",
            "phase": result.phase, "succeeded": result.succeeded,
            "duration_seconds": float(result.duration_seconds or 0.0), "retries": result.retries,
            "result": result.to_dict(),
        }
    if step == "finish_run":
        return {"pipeline_state": result.pipeline_state, "job_phase": result.job_phase, "cleanup": result.cleanup,
                "result": result.to_dict()}
    if step == "reap":
        return {"succeeded": result.succeeded, "ps_linger_seconds": float(result.ps_linger_seconds or 0.0),
                "message": result.message or "", "result": result.to_dict()}
    if step == "tensorboard":
        return {"url": result.url or "", "name": result.name, "namespace": result.namespace, "ready": result.ready,
                "result": result.to_dict()}
    if step == "serve":
        # KFP has no "no value" for an int output: -1 stands for "no version served".
        return {"rest_endpoint": result.rest_endpoint or "", "grpc_endpoint": result.grpc_endpoint or "",
                "version": -1 if result.version is None else result.version, "succeeded": result.succeeded,
                "result": result.to_dict()}
    raise KeyError(step)


def _report(step: str, result: Any, metrics: Any, summary: Any) -> None:
    data = result.to_dict()
    if step == "sync":
        numbers, text = summaries.sync_metrics(data), summaries.sync_markdown(data)
    elif step == "finish_run":
        numbers = summaries.train_metrics(data["job"]) if data.get("job") else {}
        text = summaries.finish_markdown(data)
    elif step == "reap":
        numbers, text = summaries.reap_metrics(data), summaries.reap_markdown(data)
    elif step == "tensorboard":
        numbers, text = {}, summaries.tensorboard_markdown(data)
    elif step == "serve":
        numbers, text = summaries.serve_metrics(data), summaries.serve_markdown(data)
    else:
        numbers, text = summaries.train_metrics(data), summaries.train_markdown(data)
    for name, value in numbers.items():
        metrics.log_metric(name, value)
    _write(summary, text)


def _write(artifact: Any, text: str) -> None:
    with open(artifact.path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _fail(message: str, exit_code: int) -> NoReturn:
    # The step's one-line error, not a traceback: what a user typed wrong reads like the CLI's.
    print(f"vpipe: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(exit_code)


def _progress(fn: Callable[..., Any]) -> Any:
    """Progress lines in the pod's log (what the KFP UI shows while a step runs): every step
    takes the same Progress interface."""
    from volcano_pipelines.progress import LineProgress

    if "progress" not in inspect.signature(fn).parameters:
        return None
    return LineProgress(sys.stderr)


def run_step(step: str, arguments: dict[str, Any], *, metrics: Any, summary: Any) -> tuple[Any, ...]:
    """Call the step named `step` with the component's inputs; write its metrics and summary;
    return its output parameters in the component's order. A failed step exits non-zero
    (the KFP task fails) after writing what it knows."""
    from volcano_pipelines.progress import configure_logging

    configure_logging()
    spec = COMPONENTS[step]
    fn = step_function(step)
    arguments = dict(arguments)
    final_status = arguments.pop("status", None)
    if final_status is not None:  # the exit handler: KFP's PipelineTaskFinalStatus
        arguments["pipeline_state"] = final_status.state
        arguments["error_message"] = final_status.error_message or ""
    kwargs = step_arguments(fn, arguments)
    progress = _progress(fn)
    if progress is not None:
        kwargs["progress"] = progress
    try:
        result = fn(**kwargs)
    except VpipeError as err:
        partial = getattr(err, "result", None)  # SyncFailed carries what was done
        if partial is not None:
            _report(step, partial, metrics, summary)
        else:
            _write(summary, summaries.error_markdown(step, str(err)))
        _fail(str(err), err.exit_code)
    finally:
        if progress is not None and hasattr(progress, "close"):
            progress.close()
    _report(step, result, metrics, summary)
    if step in ("train_tf", "train_mpi") and kwargs.get("wait", True) and not result.succeeded:
        # Only a job that ran to its end (or was given up on) fails the step; wait=false returns early.
        _fail(result.message or f"job {result.namespace}/{result.name} ended {result.phase}", WorkFailed.exit_code)
    if step in LIFECYCLE_STEPS and not result.succeeded:
        # As the CLI: a job whose pods failed, TensorBoard not ready, a model not served (rolled back).
        _fail(result.message or f"{step} did not succeed", WorkFailed.exit_code)
    values = outputs_of(step, result)
    return tuple(values[name] for name, _, _ in spec.outputs)
