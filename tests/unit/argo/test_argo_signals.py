"""Stop, terminate and a deleted pod as Argo's emissary delivers them, emulated here: the
container's program is started as the leader of its own process group (emissary's Setpgid),
SIGTERM goes to the whole group (emissary's `osspecific.Kill(-pgid)`), and when emissary's
direct child exits, everything left in the group is SIGKILLed (emissary is PID 1 of the
container: when it exits the kernel kills the rest of the PID namespace). `vpipe` is a stand-in
that takes SIGTERM as the real step does: a cleanup that takes a moment (the on-cancel delete),
then exit 1. The cleanup must complete; behind the old `sh -c` script it never did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.unit.argo import local_run
from tests.unit.argo.local_run import load, template

# The step's stand-in: SIGTERM -> a cleanup of CLEANUP_SECONDS, then its JSON result and exit 1.
FAKE_VPIPE = """import json, os, signal, sys, time
marks = os.environ["MARKS"]
def on_term(*_):
    time.sleep(float(os.environ.get("CLEANUP_SECONDS", "1")))
    open(os.path.join(marks, "cleaned"), "w").write("job deleted")
    print(json.dumps({"phase": "Cancelled", "succeeded": False, "message": "cancelled by SIGTERM; job deleted"}))
    sys.exit(1)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(marks, "argv"), "w").write(json.dumps(sys.argv[1:]))
open(os.path.join(marks, "started"), "w").write("")
time.sleep(120)
"""


def emissary_run(container: dict[str, Any], values: dict[str, str], tmp: Path,
                 cleanup_seconds: float = 1.0) -> tuple[int, Path, float]:
    """Run a template's container as emissary would, SIGTERM it once the step is up, and
    return (exit code of emissary's child, the marks directory, seconds from SIGTERM to the
    child's exit). The stand-in's cleanup takes `cleanup_seconds` (real time: keep it short)."""
    path = local_run.fake_path(tmp)
    fake = tmp / "bin" / "vpipe"
    (tmp / "fake_vpipe.py").write_text(FAKE_VPIPE)
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{tmp / "fake_vpipe.py"}" "$@"\n')
    marks = tmp / "marks"
    marks.mkdir()
    workflow = {"uid": "0f9c2c1e-argo-test", "namespace": "default", "name": "test-wf"}
    argv = [local_run.substitute(a, values, workflow) for a in container["command"] + container["args"]]
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(local_run.REPO / "src"), "MARKS": str(marks),
           "VPIPE_ARGO_OUT": str(tmp / "out"), "CLEANUP_SECONDS": str(cleanup_seconds)}
    proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (marks / "started").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the step never started"
            time.sleep(0.05)
        signalled = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)  # emissary forwards SIGTERM to the process group
        code = proc.wait(timeout=60)  # emissary waits for its direct child only ...
        seconds = time.monotonic() - signalled
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # ... then exits as PID 1: the kernel kills the rest
        except ProcessLookupError:
            pass
        proc.communicate()
    return code, marks, seconds


def test_sigterm_reaches_vpipe_and_its_cleanup_completes_before_the_container_ends(tmp_path: Path) -> None:
    tmpl = template(load("train-tf.yaml"))
    assert tmpl["container"]["command"][:3] == ["python3", "-m", "volcano_pipelines.argo.run"]  # no shell
    values = local_run.parameter_values(tmpl, {"name": "mnist", "timeout": "600"})
    code, marks, seconds = emissary_run(tmpl["container"], values, tmp_path, cleanup_seconds=0.4)
    assert (marks / "cleaned").exists(), "vpipe was killed before its on-cancel cleanup completed"
    assert code == 1  # vpipe's own exit code: the step failed because it was cancelled
    assert seconds >= 0.4  # the container ended only after the cleanup
    assert (tmp_path / "out" / "outputs" / "phase").read_text() == "Cancelled"


def test_the_launcher_passes_words_verbatim(tmp_path: Path) -> None:
    """The program arguments reach vpipe as they were given: no shell anywhere."""
    import json

    tmpl = template(load("train-tf.yaml"))
    values = local_run.parameter_values(tmpl, {"name": "mnist", "timeout": "600", "args": "$(id)\n'a b'\n*"})
    emissary_run(tmpl["container"], values, tmp_path, cleanup_seconds=0)  # only the argv counts here
    argv = json.loads((tmp_path / "marks" / "argv").read_text())
    assert argv[:2] == ["train", "tf"] and argv[-4:] == ["--", "$(id)", "'a b'", "*"]
