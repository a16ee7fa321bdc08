"""Step results -> what the KFP UI shows: the numbers for a Metrics artifact and the Markdown
summary. Pure: result dicts (the steps' to_dict()) in, numbers and text out."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["error_markdown", "finish_markdown", "reap_markdown", "reap_metrics", "result_markdown", "serve_markdown", "serve_metrics",
           "sync_markdown", "sync_metrics", "tensorboard_markdown", "train_markdown", "train_metrics"]

# The training summary points at the steps that follow it (where a pipeline has them).
AFTER_TRAINING = "TensorBoard's URL and the serving endpoints are in the summaries of the tensorboard and serve steps."
TASK_STATES = ("pending", "running", "succeeded", "failed", "stopped")


def _cell(value: Any) -> str:
    """One table cell: no pipes or line breaks (they would end the cell or the row)."""
    text = "" if value is None else str(value)
    return re.sub(r"\s*\n\s*", " ", text).replace("|", "\\|")


def _code(text: str) -> str:
    """A fenced block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text.rstrip()}\n{fence}"


def _table(rows: list[tuple[str, Any]]) -> list[str]:
    lines = ["| | |", "|---|---|"]
    lines += [f"| {_cell(key)} | {_cell(value)} |" for key, value in rows if value is not None]
    return lines


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f} s"


def train_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """Job duration, restarts, and how long parameter servers outlived the completion task
    (only the numbers the step knows)."""
    out: dict[str, float] = {"retries": float(result.get("retries") or 0)}
    for key in ("duration_seconds", "ps_linger_seconds", "resumed_from_step"):
        if _number(result.get(key)):
            out[key] = float(result[key])
    # The training's last reported figures (docs/progress.md), where it reported them.
    progress = result.get("progress") or {}
    for key, name in (("step", "final_step"), ("total", "total_steps"), ("loss", "final_loss"),
                      ("examples_per_second", "examples_per_second")):
        if _number(progress.get(key)):
            out[name] = float(progress[key])
    checkpoint = result.get("last_checkpoint") or {}
    if _number(checkpoint.get("step")):
        out["last_checkpoint_step"] = float(checkpoint["step"])
    # Restarts by cause (restarts_evicted, restarts_exit_code_1, ...), where the step saw any.
    for restart in result.get("restarts") or []:
        key = "restarts_" + re.sub(r"[^a-z0-9]+", "_", str(restart.get("cause") or "unknown").lower()).strip("_")
        out[key] = out.get(key, 0.0) + 1.0
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _training(result: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The training's own report: progress, last checkpoint, resumed step (or that it
    reported nothing, once the job has ended)."""
    progress = result.get("progress") or {}
    checkpoint = result.get("last_checkpoint") or {}
    rows: list[tuple[str, Any]] = []
    if _number(progress.get("step")):
        text = f"step {progress['step']}" + (f" of {progress['total']}" if _number(progress.get("total")) else "")
        if _number(progress.get("loss")):
            text += f", loss {progress['loss']:.4g}"
        if _number(progress.get("examples_per_second")):
            text += f", {progress['examples_per_second']:.1f} examples/s"
        rows.append(("training progress", text))
    elif not checkpoint and result.get("phase") in ("Completed", "Failed", "Aborted", "Terminated"):
        rows.append(("training progress", "no progress reported"))
    if _number(checkpoint.get("step")):
        rows.append(("last checkpoint", f"step {checkpoint['step']}"
                     + (f" at {checkpoint['time']}" if checkpoint.get("time") else "")
                     + (f", `{_cell(checkpoint['path'])}`" if checkpoint.get("path") else "")))
    rows.append(("resumed from step", result.get("resumed_from_step")))
    return rows


def sync_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    return {
        "files_copied": float(result.get("copied", 0)),
        "files_skipped": float(result.get("skipped", 0)),
        "files_deleted": float(result.get("deleted", 0)),
        "files_failed": float(result.get("failed", 0)),
        "files_retried": float(result.get("retried", 0)),
        "bytes_copied": float(result.get("bytes_copied", 0)),
        "throughput_mb_s": float(result.get("throughput_mb_s", 0.0)),
        "duration_seconds": float(result.get("duration_s", 0.0)),
    }


def _tasks(tasks: Mapping[str, Mapping[str, int]]) -> list[str]:
    if not tasks:
        return []
    lines = ["", "| task | " + " | ".join(TASK_STATES) + " |", "|---|" + "---:|" * len(TASK_STATES)]
    for task, counts in tasks.items():
        lines.append(f"| {_cell(task)} | " + " | ".join(str(counts.get(state, 0)) for state in TASK_STATES) + " |")
    return lines


def _failure(failure: Mapping[str, Any] | None) -> list[str]:
    if not failure:
        return []
    lines = ["", "### Failure", ""]
    lines += _table([("pod", failure.get("pod")), ("task", failure.get("task")), ("exit code", failure.get("exit_code")),
                     ("reason", failure.get("reason")), ("message", failure.get("message"))])
    if failure.get("log_tail"):
        lines += ["", f"Last log lines of `{_cell(failure.get('pod'))}`:", "", _code(str(failure["log_tail"]))]
    return lines


def _restarts(restarts: list[Mapping[str, Any]]) -> list[str]:
    if not restarts:
        return []
    lines = ["", "### Restarts", "", "| # | cause | pod | task | when | detail |", "|---:|---|---|---|---|---|"]
    for r in restarts:
        detail = ", ".join(str(x) for x in (r.get("reason"), r.get("message")) if x)
        lines.append(f"| {_cell(r.get('number'))} | {_cell(r.get('cause'))} | {_cell(r.get('pod'))} | "
                     f"{_cell(r.get('task'))} | {_cell(r.get('at'))} | {_cell(detail)} |")
    return lines


def _post_mortem(saved: Mapping[str, Any] | None) -> list[str]:
    """Where the post-mortem record is, and its short summary (headings moved down a level)."""
    if not saved:
        return []
    if saved.get("error"):
        return ["", "### Post-mortem", "", _cell(saved["error"])]
    lines = ["", "### Post-mortem", "", f"Saved as `{_cell(saved.get('json'))}` ({saved.get('bytes')} bytes, "
             f"{saved.get('pods')} pods) and `{_cell(saved.get('markdown'))}`."]
    for copy in saved.get("copies") or []:  # the pipeline's log volume (postmortem/save.py)
        lines += ["", f"Copied to `{_cell(copy.get('json'))}` and `{_cell(copy.get('markdown'))}`."]
    summary = str(saved.get("summary") or "")
    if summary:
        lines += ["", re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + 3) + " ", summary, flags=re.MULTILINE).rstrip()]
    return lines


def train_markdown(result: Mapping[str, Any]) -> str:
    """The job status table, the failure reason and log tail when it failed."""
    mark = "succeeded" if result.get("succeeded") else "did not succeed"
    title = (f"## Training job `{_cell(result.get('namespace'))}/{_cell(result.get('name'))}`: "
             f"{_cell(result.get('phase'))} ({mark})")
    lines = [title, ""]
    lines += _table([
        ("run", result.get("run_id")),
        ("backend", result.get("backend")),
        ("created by this step", "yes" if result.get("created") else "no (attached to the run's existing job)"),
        ("duration", _seconds(result.get("duration_seconds"))),
        ("restarts", result.get("retries")),
        *_training(result),
        ("parameter servers outlived the completion task by", _seconds(result.get("ps_linger_seconds"))),
        ("message", result.get("message")),
    ])
    lines += _tasks(result.get("tasks") or {})
    lines += _restarts(result.get("restarts") or [])
    lines += _failure(result.get("failure"))
    lines += _post_mortem(result.get("post_mortem"))
    missing = result.get("missing") or []
    if missing:
        lines += ["", "### Not available", ""] + [f"- {_cell(item)}" for item in missing]
    lines += ["", AFTER_TRAINING]
    return "\n".join(lines) + "\n"


def sync_markdown(result: Mapping[str, Any]) -> str:
    verdict = "dry run" if result.get("dry_run") else ("ok" if not result.get("failed") else "some files failed")
    lines = [f"## Sync `{_cell(result.get('src'))}` -> `{_cell(result.get('dst'))}`: {verdict}", ""]
    lines += _table([
        ("files copied", result.get("copied")),
        ("files skipped (unchanged)", result.get("skipped")),
        ("files deleted", result.get("deleted")),
        ("files failed", result.get("failed")),
        ("files retried", result.get("retried")),
        ("bytes copied", result.get("bytes_copied")),
        ("duration", _seconds(result.get("duration_s"))),
        ("throughput", f"{result.get('throughput_mb_s', 0.0):.1f} MB/s"),
    ])
    failures = result.get("failures") or []
    if failures:
        lines += ["", "### Failed files", "", "| path | error |", "|---|---|"]
        lines += [f"| {_cell(item.get('path'))} | {_cell(item.get('error'))} |" for item in failures]
    shards = result.get("shard_manifests") or []
    if shards:
        lines += ["", "### Shard manifests", ""] + [f"- `{_cell(path)}`" for path in shards]
    return "\n".join(lines) + "\n"


def error_markdown(step: str, message: str) -> str:
    """A step that stopped with an error before it had a result."""
    return f"## {step}: error\n\n{_code(message)}\n"


def _outcome(report: Mapping[str, Any]) -> str | None:
    outcome = report.get("outcome")
    if outcome == "unknown":
        return "unknown: nothing to decide from, nothing cleaned up"
    return None if outcome is None else str(outcome)


def _copy_job(copy_job: Mapping[str, Any] | None) -> str | None:
    if not copy_job:
        return None
    if copy_job.get("error"):
        return f"not settled: {copy_job['error']}"
    return f"{copy_job['name']} ({copy_job['phase']}): {copy_job['cleanup']}"


def finish_markdown(report: Mapping[str, Any]) -> str:
    """The exit handler's report: how the run ended, its job, and what cleanup did."""
    state = report.get("pipeline_state")
    board = report.get("tensorboard") or {}
    lines = [f"## Run `{_cell(report.get('run_id'))}`: {_cell(state)}", ""]
    lines += _table([("outcome", _outcome(report)), ("decided by", report.get("rule")),
                     ("TensorBoard", _link(board.get("url"))),
                     ("error", report.get("error_message")),
                     ("namespace", report.get("namespace")), ("cleanup of the training job", report.get("cleanup")),
                     ("copy job of the sync step", _copy_job(report.get("copy_job")))])
    job = report.get("job")
    if job:
        # The run's page answers both questions: how training went (TensorBoard above) and
        # what happened to every pod (the post-mortem, saved before the cleanup).
        lines += [""] + train_markdown({**job, "post_mortem": report.get("post_mortem") or job.get("post_mortem")}
                                       ).rstrip("\n").replace("## ", "### ", 1).splitlines()
    else:
        lines += ["", "The run has no training job (it ended before training started)."]
    return "\n".join(lines) + "\n"


def reap_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """How long the parameter servers outlived the completion task (when the step saw it end)."""
    out: dict[str, float] = {"jobs_reaped": float(len(result.get("reaped") or []))}
    if result.get("ps_linger_seconds") is not None:
        out["ps_linger_seconds"] = float(result["ps_linger_seconds"])
    return out


def _units(title: str, units: list[Mapping[str, Any]]) -> list[str]:
    if not units:
        return []
    lines = ["", f"### {title}", "", "| job | action | reason | parameter servers outlived the completion task by |",
             "|---|---|---|---|"]
    for unit in units:
        lines.append(f"| {_cell(unit.get('namespace'))}/{_cell(unit.get('name'))} | {_cell(unit.get('action'))} | "
                     f"{_cell(unit.get('reason'))} | {_cell(_seconds(unit.get('linger_seconds')))} |")
    return lines


def reap_markdown(result: Mapping[str, Any]) -> str:
    verdict = "ok" if result.get("succeeded") else "did not succeed"
    lines = [f"## Reap {_cell(result.get('scope'))}: {verdict}", ""]
    lines += _table([("message", result.get("message")),
                     ("parameter servers outlived the completion task by", _seconds(result.get("ps_linger_seconds"))),
                     ("dry run", "yes" if result.get("dry_run") else None)])
    lines += _units("Reaped", result.get("reaped") or [])
    lines += _units("Failed (never reaped)", result.get("failed") or [])
    lines += _units("Waiting", result.get("waiting") or [])
    return "\n".join(lines) + "\n"


def _link(url: Any) -> str | None:
    return None if not url else f"[{_cell(url)}]({_cell(url)})"


def tensorboard_markdown(result: Mapping[str, Any]) -> str:
    """The URL to open first, then every other way in."""
    state = "ready" if result.get("ready") else "not ready"
    lines = [f"## TensorBoard `{_cell(result.get('namespace'))}/{_cell(result.get('name'))}`: {state}", ""]
    lines += _table([
        ("open", _link(result.get("url"))),
        *((f"URL ({kind})", _link(url)) for kind, url in sorted((result.get("urls") or {}).items())),
        ("lives as long as the job", result.get("owner_job")),
        ("expires at", result.get("expires_at")),
        ("message", result.get("message")),
    ])
    return "\n".join(lines) + "\n"


def serve_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    return {} if result.get("version") is None else {"served_version": float(result["version"])}


def serve_markdown(result: Mapping[str, Any]) -> str:
    """The endpoints and the served version; the smoke test and a rollback when there were any."""
    verdict = "served" if result.get("succeeded") else "NOT served"
    lines = [f"## Model `{_cell(result.get('model_name'))}` "
             f"(`{_cell(result.get('namespace'))}/{_cell(result.get('name'))}`): {verdict}", ""]
    smoke = result.get("smoke_test")
    versions = result.get("served_versions") or []
    lines += _table([
        ("REST endpoint", result.get("rest_endpoint") and f"`{_cell(result.get('rest_endpoint'))}`"),
        ("gRPC endpoint", result.get("grpc_endpoint") and f"`{_cell(result.get('grpc_endpoint'))}`"),
        ("version", result.get("version")),
        ("versions served", ", ".join(str(v) for v in versions) if versions else None),
        ("smoke test", None if not smoke else f"{'ok' if smoke.get('ok') else 'failed'} (HTTP {smoke.get('status')})"),
        ("rolled back", "yes" if result.get("rolled_back") else None),
        ("message", result.get("message")),
    ])
    warnings = result.get("warnings") or []
    if warnings:
        lines += ["", "### Warnings", ""] + [f"- {_cell(item)}" for item in warnings]
    return "\n".join(lines) + "\n"


def result_markdown(result: Mapping[str, Any]) -> str:
    """The summary of a step with no summary of its own (kfp/runtime.py `_REPORTS`): its
    scalar fields as a table, the rest as JSON."""
    scalars = [(key, value) for key, value in result.items() if isinstance(value, (str, int, float, bool))]
    rest = {key: value for key, value in result.items() if not isinstance(value, (str, int, float, bool)) and value is not None}
    lines = ["## Result", "", *_table(scalars)]
    if rest:
        lines += ["", _code(json.dumps(rest, indent=2, sort_keys=True, default=str))]
    return "\n".join(lines) + "\n"
