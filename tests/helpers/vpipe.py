"""Running `vpipe` as a user does, in a child process against a cluster, with its JSON result."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["VPIPE", "Run", "finish", "start", "vpipe"]

# The CLI of the package under test, whatever is on PATH.
VPIPE = [sys.executable, "-c", "import sys; from volcano_pipelines.cli import main; sys.exit(main())"]


@dataclass
class Run:
    returncode: int
    result: dict[str, Any] | None  # the --json result, None when stdout held none
    stdout: str
    stderr: str


def start(kubeconfig: Any, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*VPIPE, *args, "--kubeconfig", str(kubeconfig), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> Run:
    stdout, stderr = proc.communicate(timeout=timeout)
    try:
        result = json.loads(stdout) if stdout.strip() else None
    except json.JSONDecodeError:
        result = None
    return Run(proc.returncode, result, stdout, stderr)


def vpipe(kubeconfig: Any, *args: str, timeout: float = 240) -> Run:
    return finish(start(kubeconfig, *args), timeout)
