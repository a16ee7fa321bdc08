"""Run a generated Argo container template here, as Argo would run it in its pod: the
template's parameters substituted into its args (Argo's `{{...}}` replacement, done here by
a plain string replacement of the same tags), the constant command run by a real `sh`, with
`vpipe` and `python3` on PATH being this checkout. What comes back: the exit code (what
Argo judges the step by), stdout/stderr, and the output parameters as Argo would read them
from their valueFrom paths (under $VPIPE_ARGO_OUT instead of /tmp/vpipe)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
ARGO_DIR = REPO / "pipelines" / "argo"
_TAG = re.compile(r"\{\{\s*(inputs\.parameters\.[\w-]+|workflow\.[\w.-]+)\s*\}\}")


def _rendered() -> dict[str, str]:
    # The session's one rendering of the Argo files (tests/helpers/renders.py), which
    # test_committed_argo_yaml_is_fresh also compares with the committed copies.
    from tests.helpers.renders import rendered

    return rendered("volcano_pipelines.argo.compile")


def load(name: str) -> dict[str, Any]:
    """A WorkflowTemplate / CronWorkflow as the generator renders it now: the behaviour tests
    test the code, and the freshness test (test_committed_argo_yaml_is_fresh) ties the
    committed copy under pipelines/argo/ to it."""
    from volcano_pipelines.argo.compile import OUT_DIR

    # libyaml's safe loader: the same objects, a tenth of the pure-Python parser's CPU.
    return yaml.load(_rendered()[f"{OUT_DIR}/{name}"], Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def template(workflow_template: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    templates = workflow_template["spec"]["templates"]
    wanted = name or workflow_template["spec"]["entrypoint"]
    return next(t for t in templates if t["name"] == wanted)


def parameter_values(tmpl: dict[str, Any], given: dict[str, str]) -> dict[str, str]:
    """Argo's rule: a given value, else the input's default; a required input not given is an
    error at submission."""
    values: dict[str, str] = {}
    for param in tmpl["inputs"]["parameters"]:
        name = param["name"]
        if name in given:
            values[name] = given[name]
        elif "default" in param:
            values[name] = param["default"]
        else:
            raise AssertionError(f"required parameter {name} not given")
        if "enum" in param and values[name] not in param["enum"]:
            raise AssertionError(f"{name}={values[name]!r} is not one of {param['enum']} (Argo refuses it)")
    unknown = set(given) - set(values)
    assert not unknown, f"not parameters of {tmpl['name']}: {sorted(unknown)}"
    return values


def substitute(text: str, values: dict[str, str], workflow: dict[str, str]) -> str:
    def replace(match: re.Match[str]) -> str:
        key = match.group(1)
        if key.startswith("inputs.parameters."):
            return values[key.removeprefix("inputs.parameters.")]
        return workflow[key.removeprefix("workflow.")]

    return _TAG.sub(replace, text)


@dataclass
class ContainerRun:
    returncode: int
    stdout: str
    stderr: str
    outputs: dict[str, str]  # output parameter -> value, '' where Argo would take the default


def fake_path(tmp: Path) -> str:
    """A PATH whose `vpipe` and `python3` are this checkout's (the runtime image's two programs)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, module in (("vpipe", "-m volcano_pipelines"), ("python3", "")):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" {module} "$@"\n')
        script.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def run(tmpl: dict[str, Any], given: dict[str, str], tmp: Path, *, workflow: dict[str, str] | None = None,
        env: dict[str, str] | None = None, timeout: float = 300) -> ContainerRun:
    values = parameter_values(tmpl, given)
    workflow = {"uid": "0f9c2c1e-argo-test", "namespace": "default", "name": "test-wf", **(workflow or {})}
    container = tmpl["container"]
    argv = [substitute(a, values, workflow) for a in container["command"] + container["args"]]
    out = tmp / "argo-out"
    proc_env = {
        **os.environ,
        "PATH": fake_path(tmp),
        "PYTHONPATH": str(REPO / "src") + os.pathsep + str(REPO),
        "VPIPE_ARGO_OUT": str(out),
        **(env or {}),
    }
    proc = subprocess.run(argv, capture_output=True, text=True, env=proc_env, timeout=timeout, check=False)
    outputs: dict[str, str] = {}
    for param in tmpl["outputs"]["parameters"]:
        path = Path(param["valueFrom"]["path"].replace("/tmp/vpipe", str(out), 1))
        outputs[param["name"]] = path.read_text() if path.exists() else param["valueFrom"].get("default", "")
    return ContainerRun(proc.returncode, proc.stdout, proc.stderr, outputs)
