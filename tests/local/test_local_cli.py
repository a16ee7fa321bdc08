"""`vpipe train --backend local` from the command line: what is refused up front (exit 2, nothing
created), `--no-wait` against a backend that submits and returns, one job name per working
directory across processes, and a second Ctrl-C that cuts the grace period."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.local_jobs import FileServer, Local, RUN_SH, assert_no_leak, manifest, records, run_job
from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, job
from volcano_pipelines.backends.local import LocalBackend
from volcano_pipelines.cli import main
from volcano_pipelines.errors import InputError
from volcano_pipelines.steps import _train as train_step

TRAIN = ["train", "tf", "--name", "j", "--backend", "local"]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize(("extra", "flag"), [
    (["--no-wait"], "--no-wait"),
    (["--on-cancel", "keep"], "--on-cancel"),
])
def test_what_a_local_run_cannot_honour_is_refused_before_anything_starts(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], flag: str) -> None:
    work = tmp_path / "work"
    code, out = run_cli(capsys, *TRAIN, "--code-url", "http://127.0.0.1:9/", "--local-dir", str(work), *extra)
    assert code == 2, out
    # A switch is named alone (`invalid --no-wait:`), a value with it (`invalid --on-cancel='keep':`).
    assert f"invalid {flag}" in out and "False" not in out and "local backend" in out and "Traceback" not in out
    assert not work.exists()


@pytest.mark.parametrize("flag", ["--local-dir", "--local-data-dir", "--local-log-dir"])
@pytest.mark.parametrize("where", ["a file", "below a file", "unwritable"])
def test_local_directories_that_cannot_be_used_are_refused_naming_the_flag(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, where: str) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    path = {"a file": a_file, "below a file": a_file / "sub", "unwritable": Path("/proc/vpipe-test/sub")}[where]
    work = tmp_path / "work"
    argv = [*TRAIN, "--code-url", "http://127.0.0.1:9/"]
    argv += [flag, str(path)] if flag == "--local-dir" else ["--local-dir", str(work), flag, str(path)]
    code, out = run_cli(capsys, *argv)
    assert code == 2, out
    assert f"invalid {flag}={str(path)!r}" in out and "Traceback" not in out
    assert not work.exists() and a_file.read_text() == "x"  # nothing created, nothing touched


def test_no_wait_exits_0_once_the_job_is_submitted(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`vpipe train ... --no-wait && next-step` and an Argo step with wait=false: a Pending job
    is a successful submission. A job found already failed (a re-run attaching to it) is not."""
    for phase, expected in (("Pending", 0), ("Running", 0), ("Failed", 1)):
        backend = MemoryBackend([], FakeClock(), existing=job(phase) if phase == "Failed" else None)
        backend.current = None
        if phase != "Failed":
            backend.submit = lambda manifest, phase=phase: (job(phase), True)  # type: ignore[method-assign]
        monkeypatch.setattr(train_step, "_cluster_backend", lambda *_, backend=backend: backend)
        code, out = run_cli(capsys, "train", "tf", "--name", "j", "--namespace", "ns", "--no-wait",
                            "--code-url", "http://files/")
        assert code == expected, (phase, out)
        assert f"job ns/j: {phase}" in out


@pytest.fixture
def code_url(code_server: FileServer) -> str:
    (code_server.root / "run.sh").write_text(RUN_SH)
    return code_server.url


def test_a_job_name_runs_once_per_working_directory_across_processes(local: Local, code_url: str) -> None:
    """Two runs (two backends, as two vpipe processes would have) of one name in one working
    directory: the second is refused while the first runs, as a cluster refuses it."""
    def running(seen: dict) -> bool:
        return len(records(local)) == 2 and seen["status"]["state"]["phase"] == "Running"

    first = run_job(local, manifest(code_url, "twice", run_id="a"), until=running)
    other = LocalBackend(local.workdir, log_dir=local.log_dir, output=None, grace_seconds=5)
    try:
        jobs_before = sorted(p.name for p in (local.workdir / "jobs" / "default").iterdir())
        with pytest.raises(InputError) as err:
            other.submit(manifest(code_url, "twice", run_id="b"))
        assert err.value.field == "job.name" and f"another vpipe process (pid {os.getpid()})" in str(err.value)
        assert sorted(p.name for p in (local.workdir / "jobs" / "default").iterdir()) == jobs_before
        first.session.delete()
        # Ended: the name is free again.
        job_again, created = other.submit(manifest(code_url, "twice", run_id="b", args=("--worker=exit:0",)))
        assert created
        assert other.get("default", "twice")["metadata"]["uid"] == job_again["metadata"]["uid"]
    finally:
        other.close()


def test_job_json_is_readable_by_its_owner_only(local: Local, code_url: str) -> None:
    out = run_job(local, manifest(code_url.replace("http://", "http://user:secret@"), "private",
                                  args=("--worker=exit:0",)))
    assert out.job["status"]["state"]["phase"] == "Completed"
    [job_json] = local.workdir.glob("jobs/default/private-*/job.json")
    assert "user:secret@" in job_json.read_text()  # what makes the mode matter
    assert stat.S_IMODE(job_json.stat().st_mode) == 0o600


def test_a_long_line_without_newline_is_passed_on_in_bounded_pieces(local: Local, code_url: str,
                                                                    code_server: FileServer) -> None:
    size = 3 * 1024 * 1024
    (code_server.root / "run.sh").write_text(
        "#!/bin/bash\n"
        'case "$1" in --job_name=ps) exec sleep 100000 ;; esac\n'
        f"python3 -c 'import sys; sys.stdout.write(\"x\" * {size}); sys.stdout.flush()'\n"
        "echo; echo after\n")
    out = run_job(local, manifest(code_url, "longline", ps=1, workers=1))
    assert out.job["status"]["state"]["phase"] == "Completed"
    pieces = [line for line in local.output.lines if line.startswith("worker-0 | x")]
    assert len(pieces) > 1 and max(map(len, pieces)) <= 64 * 1024 + len("worker-0 | ")
    assert sum(len(p) - len("worker-0 | ") for p in pieces) == size
    assert "worker-0 | after" in local.output.lines
    log = Path(next(r for r in local.backend.replicas("default", "longline") if r["task"] == "worker")["log"]).read_bytes()
    assert b"x" * size + b"\nafter\n" in log  # the log file has the bytes as written


def test_mpi_master_leaves_no_hostfile_in_the_machines_tmp(tmp_path: Path) -> None:
    """mktemp in the master's script writes into the pod's own /tmp, which goes with the pod."""
    from tests.helpers.local_jobs import Output
    from volcano_pipelines.volcano.mpi import build_mpi_job
    from volcano_pipelines.volcano.spec import JobOptions, MPIJobSpec, Role

    machine_tmp = tmp_path / "machine-tmp"
    machine_tmp.mkdir()
    backend = LocalBackend(tmp_path / "work", output=Output(), grace_seconds=5, env={"TMPDIR": str(machine_tmp)})
    local = Local(backend, Output(), tmp_path / "work", tmp_path / "work" / "logs", tmp_path / "work" / "data")
    try:
        spec = MPIJobSpec(job=JobOptions(name="hosts", max_retry=1), command=("true",), worker=Role(replicas=2))
        out = run_job(local, build_mpi_job(spec))
        assert out.job["status"]["state"]["phase"] == "Completed", backend._output.text()[-3000:]  # type: ignore[union-attr]
        assert list(machine_tmp.iterdir()) == []
        assert not list((tmp_path / "work").glob("jobs/default/hosts-*/attempt-0/pods/*/tmp"))
    finally:
        backend.close()
        assert_no_leak(tmp_path)


def test_a_second_interrupt_kills_the_tasks_without_waiting_out_the_grace_period(
        tmp_path: Path, code_url: str) -> None:
    """The parameter server ignores SIGTERM; the default grace period is 30 s. Ctrl-C starts
    the stop, a second Ctrl-C kills it at once."""
    work = tmp_path / "work"
    launch = ("import os, signal, sys\n"
              "for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_DFL)\n"
              "os.execv(sys.executable, [sys.executable, '-m', 'volcano_pipelines', *sys.argv[1:]])\n")
    log = tmp_path / "vpipe.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", launch, *TRAIN[:3], "grace", "--backend", "local",
                                 "--code-url", code_url, "--local-dir", str(work), "--", "--ps=stubborn"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(list((work / "logs" / "records").glob("[a-z]*.json"))) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while "interrupt again to kill them now" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        first = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 1, log.read_text()[-3000:]
        # The stubborn parameter server died of SIGKILL well inside its 30 s grace period.
        assert time.monotonic() - first < 15, log.read_text()[-3000:]
        text = log.read_text()
        assert "SIGINT again: killing the job's tasks now" in text and "job default/grace deleted" in text
        [job_json] = work.glob("jobs/default/grace-*/job.json")
        pods = json.loads(job_json.read_text())
        assert pods["metadata"]["name"] == "grace"
    finally:
        if proc.poll() is None:
            proc.kill()
        assert_no_leak(tmp_path, settle_seconds=10)
