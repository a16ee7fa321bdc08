"""`vpipe sync` as a user meets it, on local directories: the --delete guard, a
destination reached through a symlink, Ctrl-C, --json on every failure, names that are
not UTF-8, clean errors for URLs and flags, and progress off a terminal. Each test goes
through the real CLI (`main([...])`, or a `python -m` process where signals are involved)
and checks the exit code, what stderr says and what is (not) on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.needs import unavailable
from tests.helpers.trees import write_tree as _tree
from tests.storage.trees import read_tree, temp_files
from volcano_pipelines.cli import main

REPO = Path(__file__).resolve().parents[3]




def _snapshot(root: Path) -> list[str]:
    """Every path under root (files, directories, .vpipe/ too): to prove nothing changed."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _sync(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["sync", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------- 1. --delete guard


@pytest.fixture
def staged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path]:
    """s/full (6 files) synced into d; s/empty exists and is empty."""
    full = tmp_path / "s" / "full"
    _tree(full, {f"x/f{i}": str(i).encode() for i in range(1, 7)})
    (tmp_path / "s" / "empty").mkdir()
    dst = tmp_path / "d"
    assert _sync(capsys, str(full), str(dst), "-q")[0] == 0
    return tmp_path / "s", dst


def test_delete_from_an_empty_source_is_refused(staged: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    s, dst = staged
    before = read_tree(dst)
    code, out, err = _sync(capsys, str(s / "empty"), str(dst), "--delete")
    assert code == 2
    assert "refusing to delete all 6 file(s)" in err and "pass --force-delete" in err
    assert read_tree(dst) == before and len(before) == 6
    # Even a limit that allows everything does not cover an empty source...
    code, _, err = _sync(capsys, str(s / "empty"), str(dst), "--delete", "--max-delete", "100%", "-q")
    assert code == 2 and read_tree(dst) == before
    # ...only saying so does.
    code, out, _ = _sync(capsys, str(s / "empty"), str(dst), "--delete", "--force-delete", "-q")
    assert code == 0 and "deleted 6" in out and read_tree(dst) == {}


def test_delete_of_more_than_the_limit_is_refused(staged: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    s, dst = staged
    _tree(s / "half", {"x/f1": b"1", "x/f2": b"2"})
    before = _snapshot(dst)
    code, _, err = _sync(capsys, str(s / "half"), str(dst), "--delete", "-q")  # 4 of 6 > 50%
    assert code == 2
    assert "refusing to delete 4 of the 6 file(s)" in err and "--max-delete 50%" in err
    assert "pass --max-delete 4 (or 100%) or --force-delete" in err
    assert _snapshot(dst) == before
    code, out, err = _sync(capsys, str(s / "half"), str(dst), "--delete", "--dry-run", "--json", "-q")
    assert code == 2 and _snapshot(dst) == before
    report = json.loads(out)
    assert report["deleted"] == 4 and report["error"] == err.strip().removeprefix("vpipe: error: ")
    assert {i["path"] for i in report["plan"] if i["action"] == "delete"} == {"x/f3", "x/f4", "x/f5", "x/f6"}
    code, _, err = _sync(capsys, str(s / "half"), str(dst), "--delete", "--max-delete", "3", "-q")
    assert code == 2 and "more than --max-delete 3 allows" in err and _snapshot(dst) == before
    code, out, _ = _sync(capsys, str(s / "half"), str(dst), "--delete", "--max-delete", "4", "-q")
    assert code == 0 and "deleted 4" in out and set(read_tree(dst)) == {"x/f1", "x/f2"}


def test_a_small_delete_needs_no_flag(staged: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    s, dst = staged
    (s / "full" / "x" / "f6").unlink()
    code, out, _ = _sync(capsys, str(s / "full"), str(dst), "--delete", "-q")
    assert code == 0 and "deleted 1" in out


# ---------------------------------------------------------------------------- 2. destination inside the source


def test_a_destination_inside_the_source_through_a_symlink_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "s12"
    _tree(src, {"a": b"a", "sub/b": b"b"})
    link = tmp_path / "s12link"
    link.symlink_to(src)
    before = _snapshot(src)
    for _ in range(3):
        code, _, err = _sync(capsys, str(src), str(link / "inner"), "-q")
        assert code == 2 and "invalid DST=" in err and "outside the source" in err
    assert _snapshot(src) == before  # no inner/, no .vpipe/
    # The other way round: the source inside the destination (a --delete there would
    # delete the source itself), spelled through the symlink on either side.
    code, _, err = _sync(capsys, str(link / "sub"), str(src), "--delete", "-q")
    assert code == 2 and "does not contain the source" in err
    code, _, err = _sync(capsys, str(src / "sub"), str(link), "--delete", "-q")
    assert code == 2 and "does not contain the source" in err
    code, _, err = _sync(capsys, str(link), str(src), "-q")
    assert code == 2
    assert _snapshot(src) == before


def test_a_destination_inside_the_source_through_a_bind_mount_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() != 0:
        unavailable("needs root for a bind mount")
    src = tmp_path / "src"
    _tree(src, {"a": b"a"})
    other = tmp_path / "other"
    other.mkdir()
    if subprocess.run(["mount", "--bind", str(src), str(other)], capture_output=True).returncode != 0:
        unavailable("cannot bind-mount here")
    try:
        before = _snapshot(src)
        code, _, err = _sync(capsys, str(src), str(other / "inner"), "-q")  # no symlink: same device + inode
        assert code == 2 and "outside the source" in err
        assert _snapshot(src) == before
    finally:
        subprocess.run(["umount", str(other)], check=False)


# ---------------------------------------------------------------------------- 3. Ctrl-C


class _GatedSync:
    """A real `vpipe sync` process whose source reads wait at a gate (tests/unit/transfer/gated_fs.py)."""

    def __init__(self, tmp: Path, src: Path, dst: Path, *extra: str) -> None:
        self.log = tmp / "gate.log"
        self.gate = tmp / "gate.fifo"
        os.mkfifo(self.gate)
        self.env = {**os.environ, "VPIPE_TEST_LOG": str(self.log), "VPIPE_TEST_GATE": str(self.gate),
                    "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.unit.transfer.gated_fs", "sync", f"gated://{src}", str(dst),
             "--transfers", "1", "--chunk-mib", "1", "--json", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env, cwd=REPO,
        )
        # Keep the FIFO open for writing, so a read of it blocks until we write.
        self._gate_fd = os.open(self.gate, os.O_RDWR)

    def wait_open(self, name: str) -> None:
        """Until the process has opened `name` (its temporary file exists, it holds the lock)."""
        import time

        while not (self.log.exists() and f"/{name}\n" in self.log.read_text()):
            assert self.proc.poll() is None, self.proc.communicate()
            time.sleep(0.02)  # polling a file another process writes; no timing is asserted

    def stderr_line_with(self, text: str) -> str:
        assert self.proc.stderr is not None
        while True:
            line = self.proc.stderr.readline()
            assert line, f"stderr ended without {text!r}"
            if text in line:
                return line

    def release(self) -> None:
        os.write(self._gate_fd, b"x")

    def finish(self) -> tuple[int, dict, str]:  # type: ignore[type-arg]
        out, err = self.proc.communicate(timeout=120)
        return self.proc.returncode, json.loads(out), err

    def close(self) -> None:
        """Kill it if it still runs; idempotent."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
        if self._gate_fd >= 0:
            os.close(self._gate_fd)
            self._gate_fd = -1


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Path, Path, list[_GatedSync]]]:
    src = tmp_path / "src"
    _tree(src, {"a.bin": os.urandom(2_500_000), "b.txt": b"b", "c.txt": b"c", "d.txt": b"d"})
    started: list[_GatedSync] = []
    yield src, tmp_path / "dst", started
    for run in started:
        run.close()


@pytest.mark.timeout(120)  # a regression waits on a line that never comes
def test_ctrl_c_says_it_stops_finishes_the_file_in_flight_and_reports(gated, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, dst, started = gated
    run = _GatedSync(tmp_path, src, dst)
    started.append(run)
    run.wait_open("a.bin")  # the largest file goes first
    run.proc.send_signal(signal.SIGINT)
    line = run.stderr_line_with("interrupted")
    assert line.strip() == "vpipe: interrupted: stopping after the 1 file(s) in flight (Ctrl-C again to abandon them)"
    run.release()
    code, report, err = run.finish()
    assert code == 130
    assert (report["copied"], report["interrupted"], report["failed"], report["ok"]) == (1, 3, 0, False)
    assert report["error"] == "interrupted: 3 file(s) not copied; run the same command again to finish"
    assert f"vpipe: error: {report['error']}" in err and "Traceback" not in err
    assert read_tree(dst) == {"a.bin": (src / "a.bin").read_bytes()} and temp_files(dst) == []


@pytest.mark.timeout(120)  # a regression waits on a line that never comes
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_ends_a_copy_stalled_in_a_source_read_within_seconds(gated, tmp_path: Path, sig: int, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """Issue 42, item 5: every signal answered within a second or two. The source read of a.bin
    never returns here (its gate stays shut: a stalled source; a slow one is the same while a read
    fills its buffer). Before: the second signal printed its line and the process went on waiting
    for the read, holding the lock, until SIGKILL."""
    src, dst, started = gated
    run = _GatedSync(tmp_path, src, dst)
    started.append(run)
    run.wait_open("a.bin")
    run.proc.send_signal(sig)
    run.stderr_line_with("stopping after the 1 file(s) in flight")
    # Still in flight after the first signal: the process holds the lock, and neither a dry run
    # (no lock) nor a real run may call its temporary file a leftover.
    live = temp_files(dst)
    assert len(live) == 1
    code, out, err = _sync(capsys, str(src), str(dst), "--dry-run", "--json")
    assert code == 0
    assert [i for i in json.loads(out)["plan"] if i["action"] == "cleanup"] == []
    assert "another sync is running here (it holds the destination lock): its 1 temporary file(s) are not leftovers" in err
    code, out, err = _sync(capsys, str(src), str(dst), "-q")
    assert code == 1 and "another sync holds the lock" in err
    assert temp_files(dst) == live
    sent = time.monotonic()
    run.proc.send_signal(sig)
    out, err = run.proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert took < 3.0, (took, err)
    assert run.proc.returncode == 128 + sig, err
    assert "abandoning the files in flight" in err and "left 1 transfer(s) waiting on the source behind" in err
    report = json.loads(out)
    assert (report["copied"], report["interrupted"]) == (0, 4) and "Traceback" not in err
    assert temp_files(dst) == [] and read_tree(dst) == {}
    code, out, _ = _sync(capsys, str(src), str(dst), "-q")  # the lock went with the process
    assert code == 0 and "copied 4" in out and read_tree(dst) == read_tree(src)


@pytest.mark.timeout(120)  # a regression waits on a line that never comes
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_like_ctrl_c_with_a_report_and_no_temporary_file(gated, tmp_path: Path, sig: int) -> None:  # type: ignore[no-untyped-def]
    """Item 8: what a cancelled pipeline step (SIGTERM) or a closed terminal (SIGHUP) sends. Before:
    the default action, exit 143 / 129, no line, no --json report, the temporary file left."""
    src, dst, started = gated
    run = _GatedSync(tmp_path, src, dst)
    started.append(run)
    run.wait_open("a.bin")
    run.proc.send_signal(sig)
    run.stderr_line_with(f"{signal.Signals(sig).name} received")
    run.stderr_line_with("stopping after the 1 file(s) in flight")
    run.release()
    code, report, err = run.finish()
    assert code == 128 + sig
    assert (report["copied"], report["interrupted"], report["ok"]) == (1, 3, False)
    assert f"vpipe: error: {report['error']}" in err and "Traceback" not in err
    assert temp_files(dst) == [] and read_tree(dst) == {"a.bin": (src / "a.bin").read_bytes()}


@pytest.mark.timeout(120)  # a regression waits on a line that never comes
def test_the_temporary_file_of_a_killed_sync_is_a_leftover(gated, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    src, dst, started = gated
    run = _GatedSync(tmp_path, src, dst)
    started.append(run)
    run.wait_open("a.bin")
    run.close()  # SIGKILL: the lock dies with the process, the temporary file stays
    assert len(temp_files(dst)) == 1
    code, out, _ = _sync(capsys, str(src), str(dst), "--dry-run", "--json", "-q")
    assert code == 0 and [i["action"] for i in json.loads(out)["plan"]].count("cleanup") == 1
    code, out, _ = _sync(capsys, str(src), str(dst), "--json", "-q")
    assert code == 0 and json.loads(out)["cleaned"] == 1 and temp_files(dst) == []


# ---------------------------------------------------------------------------- 4. --json on every failure


def _json_failure(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code, out, err = _sync(capsys, *argv, "--json", "-q")
    report = json.loads(out)  # a report, whatever failed
    assert report["ok"] is False and report["error"]
    assert err.strip() == f"vpipe: error: {report['error']}"
    return code, report


def test_json_reports_every_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    _tree(src, {"a": b"a"})
    a_file = tmp_path / "file"
    a_file.write_bytes(b"not a directory")
    dst = tmp_path / "dst"
    code, report = _json_failure(capsys, str(tmp_path / "missing"), str(dst))
    assert code == 2 and "invalid SRC=" in report["error"] and report["copied"] == 0
    code, report = _json_failure(capsys, "gopher://host/x", str(dst))
    assert code == 2 and "hdfs://" in report["error"]
    code, report = _json_failure(capsys, "hdfs://127.0.0.1:1/data", str(dst))  # nothing listens on port 1
    assert code == 3 and "127.0.0.1:1" in report["error"]
    code, report = _json_failure(capsys, str(src), str(a_file))
    assert code == 2 and "invalid DST=" in report["error"]
    code, report = _json_failure(capsys, str(src), str(dst), "--transfers", "0")
    assert code == 2 and report["error"].startswith("invalid --transfers=0")
    assert not dst.exists()
    # Success carries no error.
    code, out, _ = _sync(capsys, str(src), str(dst), "--json", "-q")
    assert code == 0 and json.loads(out)["error"] is None and json.loads(out)["ok"] is True


def test_json_reports_what_was_copied_when_a_later_step_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    _tree(src, {"a": b"a", "b/c": b"c"})
    dst = tmp_path / "dst"
    (dst / ".vpipe").mkdir(parents=True)
    (dst / ".vpipe" / "shards").write_bytes(b"a file where the manifests' directory goes")
    code, report = _json_failure(capsys, str(src), str(dst), "--shards", "2")
    assert code == 1 and "writing shard manifests" in report["error"]
    assert report["copied"] == 2 and read_tree(dst) == read_tree(src)  # the files were synced, and it says so


def test_json_reports_a_destination_that_refuses_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() != 0:
        unavailable("needs root for a read-only bind mount")
    src = tmp_path / "src"
    _tree(src, {"a": b"a"})
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.system(f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro}") != 0:
        unavailable("cannot make a read-only bind mount here")
    try:
        code, report = _json_failure(capsys, str(src), str(ro))
        assert code == 3 and "not writable" in report["error"]
    finally:
        os.system(f"umount {ro}")


# ---------------------------------------------------------------------------- 5. names that are not UTF-8


def test_a_name_that_is_not_utf8_is_rejected_at_planning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "u"
    _tree(src, {"ok.txt": b"x"})
    (src / "link").symlink_to("/etc/hostname")
    with open(os.path.join(os.fsencode(src), b"bad\xff.bin"), "wb") as fh:
        fh.write(b"y")
    dst = tmp_path / "du"
    code, out, err = _sync(capsys, str(src), str(dst), "--dry-run")
    assert code == 1
    assert "reject   bad\\xff.bin  (name is not valid UTF-8)" in out
    # The plan line adds up: 3 entries listed = copy 1 + reject 2.
    assert "listed 3 source files" in err and "plan: copy 1 (0.0 MB), skip 0, delete 0, clean 0, reject 2" in err
    code, out, err = _sync(capsys, str(src), str(dst), "--json", "-q")
    assert code == 1
    out.encode("utf-8")  # no lone surrogates on stdout
    report = json.loads(out)
    assert {f["path"]: f["error"] for f in report["failures"]} == {
        "link": "rejected: symbolic link (not followed)",
        "bad\\xff.bin": "rejected: name is not valid UTF-8",
    }
    assert report["copied"] == 1 and "UnicodeEncodeError" not in out + err
    assert sorted(os.listdir(dst)) == [".vpipe", "ok.txt"]
    code, out, err = _sync(capsys, str(src), str(dst), "-q")
    assert code == 1 and "failed: b'bad\\xff.bin': rejected: name is not valid UTF-8" in out
    assert "b'bad\\xff.bin': rejected: name is not valid UTF-8" in err


def test_the_plan_line_counts_what_the_filters_excluded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    _tree(src, {"a.csv": b"a", "b.log": b"b", "c.log": b"c"})
    code, _, err = _sync(capsys, str(src), str(tmp_path / "dst"), "--include", "*.csv")
    assert code == 0 and "listed 3 source files" in err and "copy 1 (0.0 MB), skip 0, delete 0, clean 0, reject 0, exclude 2" in err


# ---------------------------------------------------------------------------- 6. URLs


@pytest.mark.parametrize(
    "url,wanted",
    [
        ("hdfs://[::1/x", "a well-formed URL (Invalid IPv6 URL)"),
        ("hdfs://nn:http/x", "a well-formed URL"),
        ("gopher://host/x", "an hdfs://, viewfs://, webhdfs:// or file:// URL, or a local path"),
        ("file://[::1/x", "a well-formed URL"),
    ],
)
def test_a_malformed_or_unsupported_url_is_bad_input(url: str, wanted: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _sync(capsys, url, str(tmp_path / "d"), "-q")
    assert code == 2 and f"invalid SRC={url!r}" in err and wanted in err and "hdfs://" in err
    assert "Traceback" not in err and not (tmp_path / "d").exists()


def test_a_protocol_whose_package_is_missing_says_what_to_install(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    if importlib.util.find_spec("s3fs") is None:
        code, _, err = _sync(capsys, "s3://bucket/x", str(tmp_path / "d"), "-q")
        assert code == 2 and "s3:// needs s3fs, which is not installed (pip install s3fs)" in err
    monkeypatch.setitem(sys.modules, "hdfs_native", None)  # as if the sync extra were not installed
    code, _, err = _sync(capsys, "hdfs://127.0.0.1:1/x", str(tmp_path / "d"), "-q")
    assert code == 2 and "pip install 'volcano-pipelines[sync]'" in err
    assert not (tmp_path / "d").exists()


def test_an_fsspec_url_with_a_host_reaches_that_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # ftp://x/y used to raise TypeError (the host was dropped); now the host is used and
    # an unreachable one is a remote-system problem.
    code, _, err = _sync(capsys, "ftp://127.0.0.1:1/y", str(tmp_path / "d"), "-q")
    assert code == 3 and "cannot open ftp://127.0.0.1:1/y" in err and "Traceback" not in err


# ---------------------------------------------------------------------------- 7. flags in errors


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--transfers", "0"], "vpipe: error: invalid --transfers=0: an integer from 1 to 256"),
        (["--chunk-mib", "-1"], "vpipe: error: invalid --chunk-mib=-1: a chunk size in MiB from 1 to 256"),
        (["--chunk-mib", "257"], "vpipe: error: invalid --chunk-mib=257: a chunk size in MiB from 1 to 256"),
        (["--shards", "-2"], "vpipe: error: invalid --shards=-2:"),
        (["--max-delete", "5 files"], "vpipe: error: invalid --max-delete='5 files':"),
        (["--include", ""], "vpipe: error: invalid --include='':"),
    ],
)
def test_errors_name_the_flag_and_the_value_typed(argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    _tree(src, {"a": b"a"})
    code, _, err = _sync(capsys, str(src), str(tmp_path / "d"), *argv)
    assert code == 2 and err.startswith(message)
    assert not (tmp_path / "d").exists()


def test_the_step_names_its_own_parameters(tmp_path: Path) -> None:
    from volcano_pipelines.errors import InputError
    from volcano_pipelines.steps._sync import sync

    with pytest.raises(InputError) as info:
        sync(str(tmp_path), str(tmp_path / "d"), chunk_mib=0)
    assert info.value.field == "chunk_mib" and str(info.value).startswith("invalid chunk_mib=0:")


# ---------------------------------------------------------------------------- progress off a terminal


def test_progress_off_a_terminal_ends_with_what_was_done(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    _tree(src, {"a": b"a" * 1000, "b/c": b"c" * 2000, "b/d": b"d" * 3000})
    code, _, err = _sync(capsys, str(src), str(tmp_path / "dst"))  # capsys' stderr is not a terminal
    assert code == 0
    progress = [line for line in err.splitlines() if " sync: " in line]
    assert len(progress) == 1 and "sync: 100.0% files 3/3 0.0/0.0 MB" in progress[0]
    assert " 0.0% " not in err


def test_sync_help_prints_every_flag_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse %-formats help texts: a bare "%" (the 50% default) once made --help raise.
    with pytest.raises(SystemExit) as exited:
        main(["sync", "--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "(default 50%)" in out and "--max-delete N|P%" in out


def test_a_sync_on_one_machine_loads_no_cluster_or_copy_pod_module(tmp_path: Path) -> None:
    """A sync's start is part of every small sync's cost (benchmarks/sync_bench.py (c): a no-op
    re-sync took 0.07 s longer once every `vpipe sync` imported PyYAML (through the connection
    group's kubeconfig reader), the copy pods' planning and the training job's status readers;
    0.01 s of what was left were the job specs' dataclasses, read by the step registry for two
    task-name tuples, and the uuid module, for a copy-pod run id)."""
    _tree(tmp_path / "src", {"a.txt": b"a"})
    code = ("import sys\nfrom volcano_pipelines.cli import main\n"
            f"assert main(['sync', {str(tmp_path / 'src')!r}, {str(tmp_path / 'dst')!r}, '-q']) == 0\n"
            "print(sorted(m for m in ('yaml', 'kubernetes', 'volcano_pipelines.transfer.fanout', "
            "'volcano_pipelines.transfer.partition', 'volcano_pipelines.volcano.status', 'volcano_pipelines.volcano.spec', "
            "'uuid') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.splitlines()[-1] == "[]", proc.stdout  # after the summary line
    assert (tmp_path / "dst" / "a.txt").read_bytes() == b"a"
