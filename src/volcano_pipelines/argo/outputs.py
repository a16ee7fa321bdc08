"""Run inside an Argo step after `vpipe ... --json`: one file per scalar field of the result
(`phase`, `succeeded`, `copied`, ...), which Argo reads as output parameters (valueFrom.path),
so a workflow needs no jq and no JSON parsing of its own.

    python3 -m volcano_pipelines.argo.outputs RESULT_JSON OUT_DIR

A missing or empty result (bad input, exit 2; a cluster problem, exit 3) writes nothing: the
output parameters then take their default, ''."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["output_files", "write_outputs"]


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def output_files(result: dict[str, Any]) -> dict[str, str]:
    """File name (the field, with dashes) -> content, for every scalar field."""
    return {
        key.replace("_", "-"): _text(value)
        for key, value in result.items()
        if value is None or isinstance(value, (str, int, float, bool))
    }


def write_outputs(result_path: Path, out_dir: Path) -> dict[str, str]:
    try:
        text = result_path.read_text()
    except FileNotFoundError:
        return {}
    if not text.strip():
        return {}
    try:
        result = json.loads(text)
    except json.JSONDecodeError as err:
        # Never hides the step's own exit code: the caller exits with that, this only warns.
        print(f"vpipe: warning: {result_path} is not JSON ({err}); no output parameters written", file=sys.stderr)
        return {}
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
