"""`vpipe train --backend local` when the job's files cannot be written (issue 33, item 2): a full
disk while the runner writes the job's plan (Volcano's svc files) ends the job Failed with one
line and exit 1, and leaves no half-written file; a job directory that cannot be made at all is
exit 3 before anything runs. Either way no process is left and the job's name is free again.
And the step returns only once the ended job's own record (job.json) is written."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.local_jobs import assert_no_leak
from tests.needs import unavailable
from volcano_pipelines.cli import main
from volcano_pipelines.localjob import runner as runner_module

RUN_SH = "#!/bin/sh\necho trained \"$@\"\n"


def _train(capsys: pytest.CaptureFixture[str], tmp_path: Path, work: Path) -> tuple[int, str]:
    """A one-worker job whose entry point prints a line; its code, data and logs outside `work`."""
    code_dir, data = tmp_path / "code", tmp_path / "data"
    if not code_dir.exists():
        code_dir.mkdir()
        (code_dir / "run.sh").write_text(RUN_SH)
        (code_dir / "run.sh").chmod(0o755)
        data.mkdir()
    code = main(["train", "tf", "--name", "j", "--backend", "local", "--ps", "1", "--workers", "1", "-q",
                 "--code-path", str(code_dir), "--local-dir", str(work), "--local-log-dir", str(tmp_path / "logs"),
                 "--local-data-dir", str(data)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def full_volume(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs holding the local backend's working directory, filled up once the
    directories and the job's lock file are there: the next data written fails with a real
    ENOSPC. Needs root (mount)."""
    if os.geteuid() != 0:
        unavailable("needs root to mount a tmpfs")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True).returncode:
        unavailable("cannot mount a tmpfs here")
    try:
        (mnt / "jobs" / "default").mkdir(parents=True)
        # The lock file keeps its page (truncated and rewritten with our pid in it).
        (mnt / "jobs" / "default" / "j.lock").write_text("0000000")
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as err:
            assert err.errno == errno.ENOSPC
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_while_writing_the_plan_fails_the_job_in_one_line(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, tmp_path: Path,
        full_volume: Path) -> None:
    code, out = _train(capsys, tmp_path, full_volume)

    assert code == 1, out
    assert "Traceback" not in out and "Exception in thread" not in out, out
    logged = [r for r in caplog.records if r.levelname == "ERROR"]  # the log: one line, no traceback
    assert len(logged) == 1 and logged[0].exc_info is None and "\n" not in logged[0].getMessage(), logged
    assert "No space left on device" in logged[0].getMessage()
    ends = [line for line in out.splitlines() if line.startswith("job default/j Failed")]
    assert len(ends) == 1, out
    assert ends[0].startswith("job default/j Failed: the local backend failed: [Errno 28] No space left on device: ")
    assert "/etc-volcano/" in ends[0]
    # Nothing half-made: no svc file (empty or cut short), no temporary file of one.
    (job_dir,) = (full_volume / "jobs" / "default").glob("j-*")
    assert [p.name for p in (job_dir / "etc-volcano").iterdir()] == []
    assert [p for p in full_volume.rglob("*.tmp")] == []
    assert_no_leak(full_volume)

    # Space again: the same name runs (the failed job let go of it).
    (full_volume / "filler").unlink()
    code, out = _train(capsys, tmp_path, full_volume)
    assert code == 0, out
    assert_no_leak(full_volume)


def test_a_job_directory_that_cannot_be_made_is_exit_3_before_anything_runs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's own directory refused (EACCES, as a directory another user owns gives; root
    here, so the refusal is made by hand at the one mkdir that makes it)."""
    work = tmp_path / "work"
    real_mkdir = Path.mkdir

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        if self.parent == work / "jobs" / "default" and self.name.startswith("j-"):
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", refuse)
    code, out = _train(capsys, tmp_path, work)

    assert code == 3, out
    assert "Traceback" not in out, out
    errors = [line for line in out.splitlines() if line.startswith("vpipe: error:")]
    assert errors == [f"vpipe: error: the local backend cannot write the job's files under {work}: Permission denied"]
    assert list((work / "jobs" / "default").glob("j-*")) == []
    assert not (tmp_path / "logs" / "pods" / "default").exists()  # no pod got as far as a log
    assert_no_leak(work)

    monkeypatch.setattr(Path, "mkdir", real_mkdir)
    code, out = _train(capsys, tmp_path, work)
    assert code == 0, out
    assert_no_leak(work)


def test_the_step_returns_once_the_ended_jobs_record_is_written(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's thread writes job.json after the job's end is seen (the step wakes on the
    change): the step waits for it, so what it leaves on disk is the end, never a write in
    flight (CI once found the `.job.json.tmp` of that last write after the step had returned).
    The last write is made slow here so that a step that did not wait would be caught."""
    work = tmp_path / "work"
    real_write = runner_module.write_whole

    def slow_final_write(path: Path, text: str, mode: int = 0o644) -> None:
        if path.name == "job.json" and json.loads(text)["status"]["state"]["phase"] == "Completed":
            time.sleep(1.0)
        real_write(path, text, mode)

    monkeypatch.setattr(runner_module, "write_whole", slow_final_write)
    code, out = _train(capsys, tmp_path, work)

    assert code == 0, out
    (job_json,) = work.glob("jobs/default/j-*/job.json")
    assert json.loads(job_json.read_text())["status"]["state"]["phase"] == "Completed"
    assert list(work.rglob("*.tmp")) == []
    assert_no_leak(work)
