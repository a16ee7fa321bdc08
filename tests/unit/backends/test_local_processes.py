"""The local backend's pod processes (issue 33): on a full disk (item 2), and the process group of a leftover.
cannot be written (a real ENOSPC: /dev/full) says so once and keeps passing the output on,
instead of an `Exception in thread out-...` traceback and a task blocked on a full pipe."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from volcano_pipelines.localjob.processes import PodProcess


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_an_output_reader_on_a_full_disk_reports_once_and_reads_on() -> None:
    lines: list[str] = []
    plan = SimpleNamespace(task="chief", index=0)
    pod = PodProcess(plan, "uid", Path("/dev/full"), lines.append, lambda _p: None)  # type: ignore[arg-type]
    pod.proc = subprocess.Popen(["printf", "one\\ntwo\\nthree\\n"], stdout=subprocess.PIPE)
    pod._log = open("/dev/full", "ab")  # noqa: SIM115 - the reader closes it
    pod._read_output()
    assert pod.proc.wait() == 0
    said = [line for line in lines if "cannot write the pod log" in line]
    assert len(said) == 1 and "No space left on device" in said[0], lines
    assert [line for line in lines if line not in said] == ["chief-0 | one", "chief-0 | two", "chief-0 | three"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_leftover_without_the_pod_marker_dies_with_the_process_group() -> None:
    """Issue 33: the local backend kills a pod's whole process GROUP, not only what carries the
    pod's marker. The leftover here cleared its environment (`env -i`: no marker for the scan)
    but stayed in the group; a real process, a real SIGKILL."""
    import os
    import signal
    import time

    proc = subprocess.Popen(["bash", "-c", "env -i /bin/sleep 100004 & echo $!; wait"], stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout is not None
    leftover = int(proc.stdout.readline())
    try:
        # $! is printed when the child is forked; its environment is bash's until `env -i` runs
        # sleep (a VPIPE_* variable of the test's own environment was seen there).
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{leftover}/cmdline").read_bytes().startswith(b"/bin/sleep") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _alive(leftover) and b"VPIPE" not in Path(f"/proc/{leftover}/environ").read_bytes()
        assert os.getpgid(leftover) == proc.pid
        plan = SimpleNamespace(task="worker", index=0)
        pod = PodProcess(plan, "no-process-has-this-marker", Path("/dev/null"), lambda _l: None,  # type: ignore[arg-type]
                         lambda _p: None)
        pod.proc = proc
        pod.kill_leftovers()
        assert proc.wait(10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while _alive(leftover) and time.monotonic() < deadline:
            time.sleep(0.05)  # the kernel delivers SIGKILL asynchronously; no timing is asserted
        assert not _alive(leftover)
    finally:
        if _alive(leftover):
            os.kill(leftover, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
