"""Running a generated container command for real under bash, as the kubelet would start it
(argv = command + args, env = env, /etc/volcano written as the svc plugin does), with a stub
entry point that records what it received."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from volcano_pipelines.localjob.plan import expand
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

# The stub entry point: records exactly what it received (-S: no site-packages to set up, it
# needs only the standard library; what it records does not depend on them).
RECORDER = """#!/bin/bash
exec python3 -S -c 'import json, os, sys
json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}, open(os.environ["VPIPE_TEST_OUT"], "w"))' "$@"
"""


def run_container(job: dict, task: str, tmp: Path, *, task_index: int = 0, extra_env: dict[str, str] | None = None,
                  path_prefix: str | None = None) -> subprocess.CompletedProcess:
    """Run a task's container command as the kubelet would: argv = command + args, env = env."""
    argv, env = container_process(job, task, tmp, task_index=task_index, extra_env=extra_env, path_prefix=path_prefix)
    return subprocess.run(argv, env=env, cwd=tmp, capture_output=True, timeout=60)


def container_process(job: dict, task: str, tmp: Path, *, task_index: int = 0, extra_env: dict[str, str] | None = None,
                      path_prefix: str | None = None) -> tuple[list[str], dict[str, str]]:
    """A task's container as the kubelet starts it: (argv, env)."""
    container = next(t for t in job["spec"]["tasks"] if t["name"] == task)["template"]["spec"]["containers"][0]
    # The kubelet expands $(VAR) in env values (in order) and in command and args.
    defined: dict[str, str] = {}
    for e in container["env"]:
        defined[e["name"]] = expand(e["value"], defined)
    env = dict(defined)
    env["VPIPE_CODE_DIR"] = str(tmp / "code")  # the pod's emptyDir
    env["VPIPE_SVC_DIR"] = str(write_svc_files(job, tmp / "etc-volcano"))
    env.update({"VK_TASK_INDEX": str(task_index), "VPIPE_TEST_OUT": str(tmp / "out.json"), "HOME": str(tmp)})
    env["PATH"] = (path_prefix + os.pathsep if path_prefix else "") + os.environ["PATH"]
    env.update(extra_env or {})
    return [expand(part, defined) for part in container["command"] + container["args"]], env


def svc_hosts(job: dict, task: str) -> list[str]:
    """The hosts Volcano's svc plugin writes for a task (`<job>-<task>-<i>.<job>`)."""
    name = job["metadata"]["name"]
    replicas = next(t["replicas"] for t in job["spec"]["tasks"] if t["name"] == task)
    return [f"{name}-{task}-{i}.{name}" for i in range(replicas)]


def write_svc_files(job: dict, directory: Path) -> Path:
    """/etc/volcano as the svc plugin mounts it: `<task>.host` ('-' in the name as '_'), one
    host a line, no final newline."""
    directory.mkdir(parents=True, exist_ok=True)
    for task in job["spec"]["tasks"]:
        (directory / f"{task['name'].replace('-', '_')}.host").write_text("\n".join(svc_hosts(job, task["name"])))
    return directory


def received(tmp: Path) -> dict[str, Any]:
    return json.loads((tmp / "out.json").read_text())


def tf_job(base_url: str, **overrides: Any) -> dict:
    fields: dict[str, Any] = {"job": JobOptions(name="mnist"), "code": CodeSource(url=f"{base_url}/mnist/"),
                              "worker": Role(replicas=3), "ps": Role(replicas=2)}
    fields.update(overrides)
    return build_tf_job(TFJobSpec(**fields))
