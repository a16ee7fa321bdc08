"""`vpipe train --backend local` killed the hard way: SIGKILL (nothing can be cleaned up in the
process itself), and SIGHUP (a closed terminal or a dropped SSH session), which stops the run
like SIGTERM (the job deleted, said so). Every task must die with it — run.sh, what
it started, a daemon that left the process group and cleared its environment, mpiexec's
prterun and ranks, the sshd stand-ins — as a pod dies with its node's container runtime.

The leak check (conftest.processes_touching) does not use the backend's bookkeeping: it looks
for any process that works in, names or was told about the test's directory, and kills what
it finds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.local_jobs import FileServer, assert_no_leak, processes_touching

# Workers start a daemon the way one escapes a process group and the pod's marker: a
# double fork (its parent exits: it is orphaned), setsid (a session of its own) and `env -i`
# (no environment at all). Then every task reports that it is ready and serves forever.
RUN_SH = r"""#!/bin/bash
set -u
role="${1#--job_name=}"; index="${2#--task_index=}"
log_dir=""
for arg in "$@"; do case "$arg" in --log_dir=*) log_dir="${arg#--log_dir=}" ;; esac; done
if [ "$role" = worker ]; then
  ( setsid env -i /bin/sleep 100001 < /dev/null > /dev/null 2>&1 & )
fi
sleep 100002 &
mkdir -p "$log_dir/ready" && touch "$log_dir/ready/$role-$index"
wait
"""

# Run vpipe with the default dispositions of the signals under test: a test run started with
# SIGHUP or SIGINT ignored (nohup, `scripts/test &`) would pass the ignoring on.
LAUNCH = ("import os, signal, sys\n"
          "for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_DFL)\n"
          "os.execv(sys.executable, [sys.executable, '-m', 'volcano_pipelines', *sys.argv[1:]])\n")
SIGNALS = [pytest.param(signal.SIGKILL, id="SIGKILL"), pytest.param(signal.SIGHUP, id="SIGHUP")]


def start_vpipe(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "vpipe.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", LAUNCH, *args], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    return proc, log


def wait_for(what: str, check, proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert proc.poll() is None, f"vpipe exited with {proc.returncode} before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def kill_and_check(proc: subprocess.Popen[bytes], sig: int, tmp_path: Path, log: Path) -> None:
    os.kill(proc.pid, sig)  # vpipe alone, not its process group
    if sig == signal.SIGHUP:
        # SIGHUP stops a run as SIGTERM does (issue 33, item 8): the job is deleted and said so.
        assert proc.wait(60) == 1, log.read_text()[-3000:]
        assert "cancelled by SIGHUP" in log.read_text() and " deleted" in log.read_text(), log.read_text()[-3000:]
    else:
        assert proc.wait(30) == -sig
    # Whatever a killed supervisor leaves, the check finds and kills; nothing may be found.
    try:
        assert_no_leak(tmp_path, settle_seconds=20)
    except AssertionError as err:
        raise AssertionError(f"{err}\nvpipe's output:\n{log.read_text()[-3000:]}") from None


@pytest.mark.parametrize("sig", SIGNALS)
def test_tf_tasks_die_with_a_killed_vpipe(tmp_path: Path, code_server: FileServer, sig: int) -> None:
    (code_server.root / "run.sh").write_text(RUN_SH)
    work = tmp_path / "work"
    proc, log = start_vpipe(tmp_path, "train", "tf", "--backend", "local", "--name", "dies", "--ps", "1",
                            "--workers", "2", "--chief", "--code-url", code_server.url, "--local-dir", str(work))
    try:
        ready = work / "logs" / "ready"
        wait_for("4 ready tasks", lambda: len(list(ready.glob("*"))) == 4, proc, log)
        running = processes_touching(tmp_path)
        escaped = [pid for pid, cmd in running.items() if cmd.startswith("/bin/sleep 100001")]
        assert len(escaped) == 2, running
        # What the escape achieved: no environment (no pod marker), a session of its own.
        assert all(Path(f"/proc/{pid}/environ").read_bytes() == b"" and os.getsid(pid) == pid for pid in escaped)
        assert sum(cmd.startswith("sleep 100002") for cmd in running.values()) == 4
        kill_and_check(proc, sig, tmp_path, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        assert_no_leak(tmp_path)


@pytest.mark.parametrize("sig", SIGNALS)
def test_mpi_ranks_and_mpiexec_die_with_a_killed_vpipe(tmp_path: Path, sig: int) -> None:
    work = tmp_path / "work"
    rank = "import time; time.sleep(100003)"
    proc, log = start_vpipe(tmp_path, "train", "mpi", "--backend", "local", "--name", "mdies", "--workers", "2",
                            "--local-dir", str(work), "--", "python3", "-c", rank)

    def ranks() -> list[int]:
        # Not the master's bash, mpiexec / prterun, or its shim (labelled `vpipe-entry ARGS`).
        return [pid for pid, cmd in processes_touching(tmp_path).items() if rank in cmd and "prterun" not in cmd
                and "mpiexec" not in cmd and "bash" not in cmd and "vpipe-entry" not in cmd]

    try:
        wait_for("2 MPI ranks", lambda: len(ranks()) == 2, proc, log)
        running = processes_touching(tmp_path).values()
        assert any("sshd_standin" in cmd for cmd in running) and any("prte" in cmd or "mpiexec" in cmd for cmd in running)
        kill_and_check(proc, sig, tmp_path, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        assert_no_leak(tmp_path)
