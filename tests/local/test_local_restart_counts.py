"""One restart count everywhere (issue 42, items 2 and 3), with real processes on the local
backend through the command line: a job whose code exits 3 runs max_retry times, which is
max_retry - 1 restarts in the summary, the message, --json and the post-mortem; a chief killed
with SIGKILL is named as the failure in the post-mortem, each pod with its run."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.local_jobs import FileServer, RUN_SH, assert_no_leak


@pytest.fixture
def code_url(code_server: FileServer) -> str:
    (code_server.root / "run.sh").write_text(RUN_SH)
    return code_server.url


def vpipe(work: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    flags, _, program = " ".join(argv).partition(" -- ")
    command = [sys.executable, "-m", "volcano_pipelines", *flags.split(), "--backend", "local", "--local-dir", str(work)]
    return subprocess.run(command + (["--", *program.split()] if program else []), capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize(("max_retry", "restarts"), [(3, 2), (1, 0)])
def test_one_restart_count_in_the_summary_the_message_json_and_the_post_mortem(
        tmp_path: Path, code_url: str, max_retry: int, restarts: int) -> None:
    work = tmp_path / "work"
    try:
        plain = vpipe(work, "train", "tf", "--name", "failjob", "--max-retry", str(max_retry), "--code-url", code_url,
                      "--", "--worker=exit:3")
        assert plain.returncode == 1, plain.stderr[-3000:]
        summary = plain.stdout.splitlines()[0]
        assert summary.startswith("job default/failjob: Failed in ")
        assert summary.endswith(f", {restarts} restart(s)") if restarts else "restart" not in summary, summary
        assert (f"job default/failjob Failed: restarted {restarts} time(s), max_retry {max_retry} reached: "
                "last cause pod failjob-worker-0 (task worker) exit code 3") in plain.stderr
        assert f"restart {restarts + 1}:" not in plain.stderr  # the failure that ended the job restarted nothing
        record = json.loads((work / "logs" / "post-mortem" / "default" / "failjob.json").read_text())
        assert record["job"]["retries"] == restarts and len(record["restarts"]) == restarts
        markdown = (work / "logs" / "post-mortem" / "default" / "failjob.md").read_text()
        assert f"| restarts | {restarts} (max_retry {max_retry}) |" in markdown
        assert f"restarted {restarts} time(s), maxRetry {max_retry} reached" in markdown  # the job's own message
        assert f"{restarts + 1}. restart" not in markdown

        as_json = vpipe(work, "train", "tf", "--name", "failjob2", "--max-retry", str(max_retry), "--code-url", code_url,
                        "--json", "--", "--worker=exit:3")
        result = json.loads(as_json.stdout)
        assert (result["retries"], len(result["restarts"])) == (restarts, restarts), result
        assert result["failure"]["exit_code"] == 3 and result["failure"]["pod"] == "failjob2-worker-0"
    finally:
        assert_no_leak(tmp_path, settle_seconds=10)


def test_a_chief_killed_with_sigkill_is_the_failure_in_the_post_mortem(tmp_path: Path, code_url: str) -> None:
    work = tmp_path / "work"

    def kill_chief_of_each_run() -> None:
        deadline = time.monotonic() + 120
        for attempt in (0, 1):
            marker = f"attempt-{attempt}/pods/kill9-chief-0"
            while time.monotonic() < deadline:
                pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _cwd_has(p, marker)
                        and b"sleep" in _read(p / "cmdline")]
                if pids:
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
                    break
                time.sleep(0.1)

    killer = threading.Thread(target=kill_chief_of_each_run, daemon=True)
    killer.start()
    try:
        out = vpipe(work, "train", "tf", "--name", "kill9", "--chief", "--workers", "2", "--max-retry", "2",
                    "--code-url", code_url)
        killer.join(5)
        assert out.returncode == 1, out.stderr[-3000:]
        assert out.stdout.startswith("job default/kill9: Failed in ") and ", 1 restart(s)" in out.stdout.splitlines()[0]
        record = json.loads((work / "logs" / "post-mortem" / "default" / "kill9.json").read_text())
        chiefs = [(p["run"], p["outcome"], p["failed"]) for p in record["pods"] if p["name"] == "kill9-chief-0"]
        assert chiefs == [(1, "exit code 137", True), (2, "exit code 137", True)], chiefs
        others = [p for p in record["pods"] if p["name"] != "kill9-chief-0"]
        assert len(others) == 6 and all(p["outcome"] == "stopped by the job" and not p["failed"] for p in others)
        assert {p["phase"] for p in record["pods"]} == {"Failed"}  # ended, as the kubelet reports a deleted pod
        markdown = (work / "logs" / "post-mortem" / "default" / "kill9.md").read_text()
        assert "| pods | 8 (2 failed) |" in markdown and "| pod | run | task | node | phase | what happened |" in markdown
        assert "| kill9-chief-0 | 2 | chief |  | Failed | exit code 137 |" in markdown
    finally:
        assert_no_leak(tmp_path, settle_seconds=10)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _cwd_has(proc: Path, marker: str) -> bool:
    try:
        return marker in os.readlink(proc / "cwd")
    except OSError:
        return False


def test_a_completed_job_keeps_the_counts_of_the_pods_it_stopped_and_no_phase_contradicts_its_counts(
        tmp_path: Path, code_url: str) -> None:
    """Issue 42 items 20 and 16: the parameter server and the workers still running when the
    chief completed are deleted with the job's end; --json still counts them (stopped), the
    linger is rounded, and no status line says Pending beside running pods."""
    work = tmp_path / "work"
    try:
        out = vpipe(work, "train", "tf", "--name", "okjob", "--chief", "--workers", "2", "--json", "--code-url", code_url, "--",
                    "--chief=after-peers:4")
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads(out.stdout)
        tasks = {task: {k: n for k, n in counts.items() if n} for task, counts in result["tasks"].items()}
        assert tasks == {"chief": {"succeeded": 1}, "ps": {"stopped": 1}, "worker": {"stopped": 2}}, result["tasks"]
        linger = result["ps_linger_seconds"]
        assert linger is not None and linger == round(linger, 2), linger
        lines = [line for line in out.stderr.splitlines() if "job okjob: " in line and " | " in line]
        assert any("job okjob: Running | chief: 1 running" in line for line in lines), lines
        assert not any("job okjob: Pending" in line and " 1 running" in line for line in lines), lines
        assert "ps: 0 running, 0 succeeded, 0 failed, 0 pending, 1 stopped" in lines[-1], lines[-1]
    finally:
        assert_no_leak(tmp_path, settle_seconds=10)


def test_the_local_backend_never_asks_a_controller_to_sync(local: Any, code_url: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """Issue 42 item 8: no controller runs here, so a local job Pending (its gang check, a
    restart) is never 'still Pending after its gang was admitted', however short the policy's
    patience (0 s: any admitted Pending would be nudged at once)."""
    from tests.helpers.local_jobs import manifest
    from volcano_pipelines.steps._waiting import WaitPolicy, run

    caplog.set_level(logging.WARNING)
    result = run(local.backend, manifest(code_url, "nonudge", max_retry=2, args=("--worker=exit:3",)),
                 WaitPolicy(stuck_admitted_seconds=0, hint_interval_seconds=0), None, handle_signals=False)
    assert result.phase == "Failed" and result.retries == 1
    assert "asking the controller" not in caplog.text and "after its gang was admitted" not in caplog.text
