"""The pod init (localjob/shim.py) on its own: the main process's exit status passes through,
SIGTERM reaches the main process, and the whole tree goes when the main process exits, when
told to, and when the control pipe closes (the backend died) — a daemon that escaped by a
double fork, setsid and `env -i` included. The leak check looks at the test's directory (every
process here works in it), not at anything the shim keeps."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.helpers.local_jobs import assert_no_leak, processes_touching
from volcano_pipelines.localjob.processes import supervised_popen

ESCAPE = "( setsid env -i /bin/sleep 100004 < /dev/null > /dev/null 2>&1 & ); "


def start(tmp_path: Path, script: str) -> tuple[subprocess.Popen[bytes], int]:
    return supervised_popen(["bash", "-c", script], cwd=str(tmp_path), stdin=subprocess.DEVNULL)


def escaped(tmp_path: Path, want: int = 1, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        found = [pid for pid, cmd in processes_touching(tmp_path).items() if cmd.startswith("/bin/sleep 100004")]
        if len(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_exit_status_passes_through_and_the_tree_goes_with_the_main_process(tmp_path: Path) -> None:
    proc, control = start(tmp_path, ESCAPE + "until [ -e go ]; do sleep 0.05; done; exit 3")
    try:
        assert len(escaped(tmp_path)) == 1
        (tmp_path / "go").touch()
        assert proc.wait(30) == 3
        assert_no_leak(tmp_path, settle_seconds=5)
    finally:
        os.close(control)
        assert_no_leak(tmp_path, settle_seconds=5)


def test_sigterm_reaches_the_main_process(tmp_path: Path) -> None:
    proc, control = start(tmp_path, "trap 'exit 7' TERM; touch ready; sleep 100005 & wait")
    try:
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 7
    finally:
        os.close(control)
        assert_no_leak(tmp_path, settle_seconds=5)


def test_a_byte_on_the_control_pipe_kills_the_tree_now(tmp_path: Path) -> None:
    proc, control = start(tmp_path, ESCAPE + "trap '' TERM; sleep 100006")
    try:
        assert len(escaped(tmp_path)) == 1
        os.write(control, b"k")
        assert proc.wait(30) == 128 + signal.SIGKILL
    finally:
        os.close(control)
        assert_no_leak(tmp_path, settle_seconds=5)


def test_the_tree_dies_when_the_control_pipe_closes(tmp_path: Path) -> None:
    """What a killed backend leaves: no writer on the control pipe."""
    proc, control = start(tmp_path, ESCAPE + "sleep 100007")
    assert len(escaped(tmp_path)) == 1
    os.close(control)
    assert proc.wait(30) == 128 + signal.SIGKILL
    assert_no_leak(tmp_path, settle_seconds=5)
