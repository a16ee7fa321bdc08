"""What runs inside a KFP step pod: the generated component function hands its inputs here;
this translates them to the step's arguments (KFP's conventions -> Python values), calls the
step, and turns the result into the component's outputs (parameters, a Metrics artifact, a
Markdown summary). No decisions about values: the step checks them."""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from volcano_pipelines.errors import VpipeError, WorkFailed
from volcano_pipelines.kfp import summary as summaries
from volcano_pipelines.kfp.generate import kfp_type
from volcano_pipelines.interface.params import grouped, item_hint, params
from volcano_pipelines.steps import TrainResult
from volcano_pipelines.steps.registry import step as registered

__all__ = ["outputs_of", "run_step", "step_arguments", "step_function"]

log = logging.getLogger("volcano_pipelines.kfp")
# How each result type is shown in the KFP UI: (metrics, Markdown summary), from its to_dict().
_REPORTS: dict[str, tuple[Callable[[Any], dict[str, float]], Callable[[Any], str]]] = {
    "SyncResult": (summaries.sync_metrics, summaries.sync_markdown),
    "TrainResult": (summaries.train_metrics, summaries.train_markdown),
    "RunReport": (lambda data: summaries.train_metrics(data["job"]) if data.get("job") else {}, summaries.finish_markdown),
    "ReapResult": (summaries.reap_metrics, summaries.reap_markdown),
    "TensorboardResult": (lambda data: {}, summaries.tensorboard_markdown),
    "ServeResult": (summaries.serve_metrics, summaries.serve_markdown),
}


def step_function(step: str) -> Callable[..., Any]:
    return registered(step).function()


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
        base, _ = kfp_type(param.hint)
        if not param.required and param.default is None and isinstance(value, (str, list, dict)) and not value:
            value = None
        elif base == "int":
            value = _integral(value)
        elif base == "dict" and isinstance(value, Mapping) and item_hint(param.hint) is int:
            value = {key: _integral(item) for key, item in value.items()}
        elif base == "list" and isinstance(value, list) and item_hint(param.hint) is int:
            value = [_integral(item) for item in value]  # serve's versions
        out[param.name] = value
    return grouped(fn, out)


def outputs_of(step: str, result: Any) -> dict[str, Any]:
    """A step result -> the component's output parameters, by name (as its result type
    marks them: steps/registry.py)."""
    return {out.name: out.value(result) for out in registered(step).outputs()}


def _from_kfp_pod(fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """What the pipeline left empty and the KFP pod knows (steps/_identity.py): the run id
    (a pipeline of a user's own that passes none: a retried step then attaches to its job), and
    the run's Workflow as the job's owner, so deleting the run (or KFP's TTL of its Workflow)
    deletes the job too. A cancelled run is the case this is for: KFP does not start the exit
    handler then, and its launcher exits at SIGTERM without waiting for the step, so the
    container ends before the step's own cleanup is done (docs/kfp.md). Only in the pod's own
    namespace: an owner in another namespace counts as absent, and the garbage collector would
    delete the job at once."""
    names = inspect.signature(fn).parameters
    wants_run = "run_id" in names and kwargs.get("run_id") is None
    wants_owner = "owner" in names and kwargs.get("owner") is None
    if not (wants_run or wants_owner):
        return
    from volcano_pipelines.steps import Connection, kfp_pod, owner_in

    pod = kfp_pod(kwargs.get("connection") or Connection())
    if pod is None:
        return
    if wants_run and pod.run_id:
        kwargs["run_id"] = pod.run_id
        log.info("run_id not given: the KFP run id %s (label of pod %s)", pod.run_id, pod.name)
    elif wants_run:
        log.warning("run_id not given and pod %s/%s has no pipeline/runid label: a retried step will not re-attach",
                    pod.namespace, pod.name)
    owner = owner_in(pod.workflow, pod.namespace, kwargs.get("namespace"))
    if wants_owner and owner:
        kwargs["owner"] = owner
        log.info("the job is owned by the run's Workflow %s: deleting the run deletes it", owner.split("/")[2])


def _report(result: Any, metrics: Any, summary: Any) -> None:
    data = result.to_dict()
    # A step the KFP UI has no summary for yet (a new one): no numbers, its fields as a table.
    numbers, markdown = _REPORTS.get(type(result).__name__, (lambda _data: {}, summaries.result_markdown))
    for name, value in numbers(data).items():
        metrics.log_metric(name, value)
    _write(summary, markdown(data))


def _write(artifact: Any, text: str) -> None:
    _write_path(artifact.path, text)


def _write_path(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
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


def _post_mortem_into(artifact: Any) -> None:
    """Point the step's post-mortem records (postmortem/save.py) at the output artifact, a
    directory KFP uploads as it is: the records outlive the step pod."""
    from volcano_pipelines.steps import POST_MORTEM_DIR_ENV

    os.makedirs(artifact.path, exist_ok=True)
    os.environ[POST_MORTEM_DIR_ENV] = artifact.path


def _post_mortem_index(artifact: Any) -> None:
    """KFP uploads a directory file by file: one that stayed empty says why, so the artifact is
    never an empty listing."""
    if not any(os.scandir(artifact.path)):
        _write_path(os.path.join(artifact.path, "README.md"),
                    "No post-mortem record was written by this step (no training job, or the step ended "
                    "before the job did).\n")


def run_step(step: str, arguments: dict[str, Any], *, metrics: Any, summary: Any,
             post_mortem: Any = None) -> tuple[Any, ...]:
    """Call the step named `step` with the component's inputs; write its metrics and summary
    (and its post-mortem records into `post_mortem`, for the steps that have that artifact);
    return its output parameters in the component's order. A failed step exits non-zero
    (the KFP task fails) after writing what it knows."""
    from volcano_pipelines.progress import configure_logging

    configure_logging()
    if post_mortem is not None:
        _post_mortem_into(post_mortem)
    fn = step_function(step)
    arguments = dict(arguments)
    final_status = arguments.pop("status", None)
    if final_status is not None:  # the exit handler: KFP's PipelineTaskFinalStatus
        arguments["pipeline_state"] = final_status.state
        arguments["error_message"] = final_status.error_message or ""
    kwargs = step_arguments(fn, arguments)
    _from_kfp_pod(fn, kwargs)
    progress = _progress(fn)
    if progress is not None:
        kwargs["progress"] = progress
    try:
        result = fn(**kwargs)
    except VpipeError as err:
        partial = getattr(err, "result", None)  # SyncFailed carries what was done
        if partial is not None:
            _report(partial, metrics, summary)
        else:
            _write(summary, summaries.error_markdown(step, str(err)))
        _fail(str(err), err.exit_code)
    finally:
        if progress is not None:
            progress.close()
        if post_mortem is not None:
            _post_mortem_index(post_mortem)
    _report(result, metrics, summary)
    if isinstance(result, TrainResult):
        if kwargs.get("wait", True) and not result.succeeded:
            # Only a job that ran to its end (or was given up on) fails the step; wait=false returns early.
            _fail(result.message or f"job {result.namespace}/{result.name} ended {result.phase}", WorkFailed.exit_code)
    elif getattr(result, "succeeded", True) is False:
        # As the CLI: a job whose pods failed, TensorBoard not ready, a model not served (rolled back).
        _fail(result.message or f"{step} did not succeed", WorkFailed.exit_code)
    values = outputs_of(step, result)
    return tuple(values.values())
