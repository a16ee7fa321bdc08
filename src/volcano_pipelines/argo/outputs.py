"""Run inside an Argo step after `vpipe ... --json`: one file per scalar field of the result
(`phase`, `succeeded`, `copied`, ...), which Argo reads as output parameters (valueFrom.path),
so a workflow needs no jq and no JSON parsing of its own.

    python3 -m volcano_pipelines.argo.outputs RESULT_JSON OUT_DIR

A missing or empty result (bad input, exit 2; a cluster problem, exit 3) writes nothing: the
output parameters then take their default, ''."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["DERIVED", "TERMINATION_MESSAGE_LIMIT", "output_files", "termination_message", "write_outputs"]

# Kubernetes keeps at most 4096 bytes of a container's termination message.
TERMINATION_MESSAGE_LIMIT = 4096
TERMINATION_LOG_LINES = 3


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _key(key: str) -> Callable[[Any], str]:
    return lambda value: _text(value.get(key)) if isinstance(value, dict) else ""


def _post_mortem(saved: Any) -> str:
    if not isinstance(saved, dict):
        return ""
    return str(saved.get("summary") or saved.get("error") or "")


# Outputs read out of a structured field of the result, so a workflow reads them without JSON:
# (output name, the result field, how). The training's final figures carry the names of the
# KFP Metrics (kfp/summary.py train_metrics); the post-mortem output is the record's short
# Markdown summary (the failed pod, its exit code and last log lines, every other pod).
DERIVED: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("final-step", "progress", _key("step")),
    ("total-steps", "progress", _key("total")),
    ("final-loss", "progress", _key("loss")),
    ("examples-per-second", "progress", _key("examples_per_second")),
    ("last-checkpoint-step", "last_checkpoint", _key("step")),
    ("post-mortem", "post_mortem", _post_mortem),
)


def output_files(result: dict[str, Any]) -> dict[str, str]:
    """File name (the field, with dashes) -> content, for every scalar field, and the outputs
    DERIVED from the result's structured fields."""
    files = {
        key.replace("_", "-"): _text(value)
        for key, value in result.items()
        if value is None or isinstance(value, (str, int, float, bool))
    }
    for name, source, show in DERIVED:
        if source in result:
            files[name] = show(result[source])
    return files


def termination_message(result: Any) -> str:
    """What a failed step says in one line (the container's termination message, which Argo
    shows as the node's message): the result's message and, for a failed pod of the job, the
    last lines of its log (a few: a program's stdout and stderr reach the log through two
    pipes, so the line written last is not always the last one there). Empty when the result
    says nothing."""
    if not isinstance(result, dict) or not isinstance(result.get("message"), str):
        return ""
    text: str = result["message"]
    failure = result.get("failure")
    tail = failure.get("log_tail") if isinstance(failure, dict) else None
    lines = [line.strip() for line in tail.splitlines() if line.strip()] if isinstance(tail, str) else []
    if lines:
        text += f"; last log lines: {' | '.join(lines[-TERMINATION_LOG_LINES:])}"
    return text.encode()[:TERMINATION_MESSAGE_LIMIT].decode(errors="ignore")


def read_result(result_path: Path) -> Any:
    """The step's JSON result; None when there is none (bad input, a cluster problem)."""
    try:
        text = result_path.read_text()
    except FileNotFoundError:
        return None
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        # Never hides the step's own exit code: the caller exits with that, this only warns.
        print(f"vpipe: warning: {result_path} is not JSON ({err}); no output parameters written", file=sys.stderr)
        return None


def write_outputs(result_path: Path, out_dir: Path) -> dict[str, str]:
    return write_output_files(read_result(result_path), out_dir)


def write_output_files(result: Any, out_dir: Path) -> dict[str, str]:
    """One file per output parameter of the parsed `result` (none for anything but a dict)."""
    files = output_files(result) if isinstance(result, dict) else {}
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (out_dir / name).write_text(content)
    return files


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python3 -m volcano_pipelines.argo.outputs RESULT_JSON OUT_DIR", file=sys.stderr)
        return 2
    write_outputs(Path(args[0]), Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
