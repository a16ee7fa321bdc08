"""Running jobs on the local backend in tests: the backend and its collected output, driving a
job's watch to its end, its replicas, the leak check on the process table, and the run.sh whose
arguments pick each task's behaviour."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from volcano_pipelines.backends.local import LocalBackend, LocalSession
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.status import FINAL_PHASES
from volcano_pipelines.volcano.tf import build_tf_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass
class FileServer:
    root: Path
    url: str  # ends with '/'


class Output:
    """The backend's output stream, kept for assertions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lines: list[str] = []
        self._partial = ""

    def write(self, text: str) -> int:
        with self._lock:
            text = self._partial + text
            *complete, self._partial = text.split("\n")
            self.lines.extend(complete)
        return len(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)


@dataclass
class Local:
    backend: LocalBackend
    output: Output
    workdir: Path
    log_dir: Path
    data_dir: Path
    jobs: list[tuple[str, str]] = field(default_factory=list)


def processes_touching(root: Path) -> dict[int, str]:
    """Every process (but this one) whose working directory, command line or environment
    names `root`, with its command line: the leak check. Deliberately independent of the
    backend's own bookkeeping (its pod marker, process groups, shims), which it checks: a
    process of a test's pods works in, writes to or was told about the test's directory, even
    one that cleared its environment (its working directory is still there)."""
    needle = str(root).encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes()
            hits = needle in cmdline
            try:
                hits = hits or os.readlink(entry / "cwd").startswith(str(root))
                hits = hits or needle in (entry / "environ").read_bytes()
            except OSError:  # not ours to look into: only its command line counts
                pass
        except (OSError, IndexError):  # gone meanwhile
            continue
        if hits:
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode("utf-8", "replace")[:200]
    return found


def assert_no_leak(root: Path, settle_seconds: float = 0.0) -> None:
    """Fails when a process of `root` is still there (after waiting up to `settle_seconds`
    for it to go), and kills every one it found either way, so that one test's leak does not
    run on into the next ones."""
    deadline = time.monotonic() + settle_seconds
    left = processes_touching(root)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_touching(root)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    assert not left, f"processes left behind (now killed): {left}"


@dataclass
class Outcome:
    job: dict[str, Any]
    phases: list[str]  # every phase the watch saw, in order
    pods: list[dict[str, Any]]
    failed_pods: list[dict[str, Any]]
    linger: float | None
    session: LocalSession


def run_job(local: Local, manifest: dict[str, Any], *, timeout: float = 600,
            until: Callable[[dict[str, Any]], bool] | None = None) -> Outcome:
    """Submit and drive session.watch() the way the step's wait policy does: until the job's
    phase is final (or `until(job)` holds). `timeout` only guards against a hung test."""
    job, created = local.backend.submit(manifest)
    assert created
    local.jobs.append((job["metadata"]["namespace"], job["metadata"]["name"]))
    deadline = time.monotonic() + timeout
    phases: list[str] = []
    with local.backend.session(job, log_lines=20) as session:
        for seen in session.watch(lambda: 1.0):
            assert time.monotonic() < deadline, f"job still {phases[-1:]} after {timeout}s:\n{local.output.text()[-3000:]}"
            if seen is not None:
                job = seen
            phase = job["status"]["state"]["phase"]
            if not phases or phases[-1] != phase:
                phases.append(phase)
            if (until is not None and until(job)) or (until is None and phase in FINAL_PHASES):
                break
        return Outcome(job, phases, session.pods(), session.failed_pods(), session.linger_seconds(), session)


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def replica(local: Local, name: str, pod: str, attempt: int = 0) -> dict[str, Any]:
    return next(r for r in local.backend.replicas("default", name) if r["pod"] == pod and r["attempt"] == attempt)


RUN_SH = r"""#!/bin/bash
# The job's arguments pick each task's behaviour: --<task>=<behaviour>.
set -u
role="${1#--job_name=}"; index="${2#--task_index=}"
log_dir=""; behaviour=serve
for arg in "$@"; do
  case "$arg" in
    --log_dir=*) log_dir="${arg#--log_dir=}" ;;
    "--$role="*) behaviour="${arg#--$role=}" ;;
  esac
done
mkdir -p "$log_dir/records"
python3 - "$@" > "$log_dir/records/.$role-$index.json" <<'EOF'
import json, os, sys
json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid()}, sys.stdout)
EOF
mv "$log_dir/records/.$role-$index.json" "$log_dir/records/$role-$index.json"
echo "$role $index: $behaviour"
case "$behaviour" in
  serve) exec sleep 100000 ;;  # like server.join(): never exits
  stubborn) trap '' TERM; exec sleep 100000 ;;  # ignores SIGTERM (inherited through exec)
  exit:*)
    code="${behaviour#exit:}"
    echo "working"; echo "something went wrong" >&2; echo "exiting with $code"
    exit "$code" ;;
  after-peers:*)  # exit 0 once every task has recorded (the chief finishing after all started)
    want="${behaviour#after-peers:}"
    while [ "$(ls "$log_dir/records" | grep -c '^[a-z].*json$')" -lt "$want" ]; do sleep 0.1; done
    echo "all $want started; done"; exit 0 ;;
  orphan)  # a detached child that leaves the process group, like a daemonizing server
    setsid sleep 100000 < /dev/null > /dev/null 2>&1 &
    echo $! > "$log_dir/records/orphan-$role-$index.pid"
    exec sleep 100000 ;;
esac
"""


def manifest(server_url: str, name: str, *, ps: int = 1, workers: int = 1, chief: bool = False, args: tuple[str, ...] = (),
             run_id: str | None = None, max_retry: int = 3, restart: bool = True) -> dict:
    spec = TFJobSpec(
        job=JobOptions(name=name, run_id=run_id, max_retry=max_retry, restart_on_failure=restart),
        code=CodeSource(url=server_url),
        ps=Role(replicas=ps),
        worker=Role(replicas=workers),
        chief=Role() if chief else None,
        args=args,
    )
    return build_tf_job(spec)


def records(local: Local) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((local.log_dir / "records").glob("[a-z]*.json"))}
