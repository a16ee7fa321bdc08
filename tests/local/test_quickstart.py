"""The README's first command, end to end: scripts/quickstart's program makes a dataset, syncs
it with the real engine, trains it with real TensorFlow on the local backend (1 ps + 2 workers
+ chief), starts TensorBoard over the logs and makes one prediction from the export. Then how
it ends: Ctrl-C after --keep-tensorboard (the documented way), SIGTERM while TensorBoard runs,
SIGKILL while it trains, a re-run in the same work dir, and `--render` into a closed pipe."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.helpers.local_jobs import assert_no_leak, processes_touching

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"
# The signals under test at their defaults, whatever the test run was started with.
LAUNCH = ("import os, signal, sys\n"
          "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
          "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n")


class Quickstart:
    def __init__(self, tmp_path: Path, name: str, *args: str) -> None:
        self.out, self.err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(QUICKSTART), *args], stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def wait_for(self, text: str, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr():
            assert self.proc.poll() is None, f"exited {self.proc.returncode} before {text!r}:\n{self.stderr()[-4000:]}"
            assert time.monotonic() < deadline, f"no {text!r} after {timeout}s:\n{self.stderr()[-4000:]}"
            time.sleep(0.5)

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(120)


def check_summary(quickstart: Quickstart, work: Path, run: int, copied: int) -> None:
    out = quickstart.stdout()
    # A restart names its cause in the summary; the task's own words are in stderr.
    assert re.search(r"job +default/quickstart: Completed in [\d.]+s, 0 restart\(s\)", out), \
        out + "\n-- stderr (end):\n" + quickstart.stderr()[-6000:]
    assert "restarted " not in out, out
    assert "chief: 1 succeeded" in out and "ps: 1 stopped by CompleteJob" in out
    linger = re.search(r"parameter server outlived the chief by ([\d.]+)s", out)
    assert linger and float(linger.group(1)) > 0
    assert re.search(r"prediction +label [01]: probability (0|1)\.\d+", out)
    assert re.search(r"TensorBoard +http://127\.0\.0\.1:\d+/", out)
    assert f"11 files synced into {work / 'data'} ({copied} copied this run, {11 - copied} already there)" in out, out
    run_dir = work / "logs" / f"run-{run}"
    assert f"trained        steps 1..300 into {run_dir}" in out, out
    export = re.search(r"model +(\S+) \(version (\d+)\)", out)
    assert export and export.group(2) == "300" and Path(export.group(1)).is_relative_to(run_dir)
    assert (Path(export.group(1)) / "saved_model.pb").is_file()


def check_summary_json(quickstart: Quickstart, work: Path, run: int, copied: int) -> None:
    """--json: the summary as one object, the job's result as `train --json` gives it."""
    summary = json.loads(quickstart.stdout())
    job = summary["job"]
    assert (job["phase"], job["retries"], job["name"]) == ("Completed", 0, "quickstart"), job
    assert job["tasks"]["chief"]["succeeded"] == 1 and job["tasks"]["ps"]["stopped"] == 1, job["tasks"]
    assert summary["dataset"]["files"] == 11 and summary["dataset"]["copied"] == copied
    assert summary["dataset"]["skipped"] == 11 - copied
    run_dir = work / "logs" / f"run-{run}"
    assert summary["trained"]["steps"] == 300 and summary["trained"]["logs"] == str(run_dir)
    assert summary["model"]["version"] == 300 and Path(summary["model"]["export"]).is_relative_to(run_dir)
    assert summary["prediction"]["label"] in ("0", "1") and 0 <= summary["prediction"]["probability"] <= 1
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", summary["tensorboard"]["url"]), summary["tensorboard"]


def test_quickstart_runs_the_whole_workflow_and_again_and_stops_cleanly(tmp_path: Path) -> None:
    work = tmp_path / "work"
    first = Quickstart(tmp_path, "first", "--workdir", str(work), "--keep-tensorboard")
    try:
        first.wait_for("TensorBoard keeps running; Ctrl-C stops it")
        check_summary(first, work, run=1, copied=11)
        synced = work / "data"
        assert sorted(p.name for p in synced.glob("train-*.tfrecord")) == [f"train-0000{i}-of-00004.tfrecord" for i in range(4)]
        # The tasks' output went to the log, prefixed by task and index.
        assert re.search(r"^chief-0 \| ", first.stderr(), re.M) and re.search(r"^ps-0 \| ", first.stderr(), re.M)
        assert any("tensorboard.main" in cmd for cmd in processes_touching(tmp_path).values())
        # Ctrl-C: the documented way to stop TensorBoard; not an error.
        assert first.stop(signal.SIGINT) == 0, first.stderr()[-3000:]
        assert "Traceback" not in first.stderr() and "TensorBoard stopped" in first.stderr()
        assert_no_leak(tmp_path, settle_seconds=10)

        # Again in the same work dir: nothing to copy, a fresh training run of its own.
        # With --json: the same summary as one object on stdout.
        second = Quickstart(tmp_path, "second", "--workdir", str(work), "--keep-tensorboard", "--json")
        second.wait_for("TensorBoard keeps running; Ctrl-C stops it")
        check_summary_json(second, work, run=2, copied=0)
        assert "resumed" not in second.stderr()
        # SIGTERM while TensorBoard runs: it goes too.
        assert second.stop(signal.SIGTERM) == 128 + signal.SIGTERM, second.stderr()[-3000:]
        assert "Traceback" not in second.stderr() and "stopped by SIGTERM" in second.stderr()
        assert_no_leak(tmp_path, settle_seconds=10)

        # SIGKILL while it trains: the job's tasks die with it.
        third = Quickstart(tmp_path, "third", "--workdir", str(work))
        third.wait_for("job quickstart: Running")
        assert third.stop(signal.SIGKILL) == -signal.SIGKILL
        assert_no_leak(tmp_path, settle_seconds=20)
    finally:
        for run in ("first", "second", "third"):
            proc = locals().get(run)
            if proc is not None and proc.proc.poll() is None:
                proc.proc.kill()
        assert_no_leak(tmp_path, settle_seconds=10)


def test_quickstart_render_prints_the_same_job_as_yaml() -> None:
    proc = subprocess.run([sys.executable, str(QUICKSTART), "--render", "--code-url", "http://files/tf-ps/"],
                          capture_output=True, text=True, timeout=120, check=True)
    job = yaml.safe_load(proc.stdout)
    assert job["kind"] == "Job" and job["metadata"]["name"] == "quickstart"
    assert {t["name"]: t["replicas"] for t in job["spec"]["tasks"]} == {"chief": 1, "ps": 1, "worker": 2}


def test_quickstart_render_into_a_closed_pipe_is_not_an_error() -> None:
    """`--render | head -1`: the reader may be gone before anything is written."""
    proc = subprocess.Popen([sys.executable, str(QUICKSTART), "--render"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the program has written anything (it starts up for a second)
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 0 and err == ""
