"""The build cache the three build harnesses share (tests/helpers/build_cache.py): the key's
bytes, a build staged and renamed into place, a failed build that leaves no entry, and a
second process that waits for the first one's lock and builds nothing. Real files and
processes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers.build_cache import COMPLETE_MARKER, LOCK_NAME, PinHash, cached_build, is_complete, staging_dir

ROOT = Path(__file__).resolve().parents[3]


def test_the_key_is_the_hash_of_the_labelled_inputs(tmp_path: Path) -> None:
    """The byte layout the harnesses' keys were computed with before the helper (label, NUL,
    bytes; then settings): the warm caches keep their directory names."""
    (tmp_path / "go.mod").write_text("module x\n")
    key = PinHash()
    key.file(tmp_path / "go.mod", "k8s/go.mod")
    key.data("-s -w")
    key.data(b"\x01\x02")
    expected = hashlib.sha256(b"k8s/go.mod\0module x\n" + b"-s -w" + b"\x01\x02").hexdigest()[:16]
    assert key.key() == expected and len(expected) == 16


def test_a_build_is_staged_then_renamed_and_reused(tmp_path: Path) -> None:
    directory = tmp_path / "cache" / "bin" / "0123456789abcdef"
    seen: list[Path] = []
    logged: list[str] = []

    def build_into(staging: Path) -> None:
        seen.append(staging)
        assert staging == staging_dir(directory) and staging.is_dir() and not any(staging.iterdir())
        if len(seen) == 1:
            assert not directory.exists()  # nobody sees the entry before it is whole
        else:  # forced: the old entry stays usable until the new one replaces it
            assert (directory / "tool").read_text() == "built"
        (staging / "tool").write_text("built")

    assert cached_build(directory, build_into, log=logged.append, up_to_date="tools up to date") == directory
    assert (directory / "tool").read_text() == "built" and (directory / COMPLETE_MARKER).exists()
    assert not staging_dir(directory).exists() and (directory.parent / LOCK_NAME).exists()
    assert cached_build(directory, build_into, log=logged.append, up_to_date="tools up to date") == directory
    assert len(seen) == 1 and logged == [f"tools up to date: {directory}"]
    cached_build(directory, build_into, force=True, log=logged.append)
    assert len(seen) == 2


def test_a_failed_build_leaves_no_entry_and_the_next_one_builds(tmp_path: Path) -> None:
    directory = tmp_path / "node" / "fedcba9876543210"

    def broken(staging: Path) -> None:
        (staging / "kubelet").write_text("half")
        raise subprocess.CalledProcessError(1, ["go", "build"])

    with pytest.raises(subprocess.CalledProcessError):
        cached_build(directory, broken)
    assert not directory.exists() and not staging_dir(directory).exists()
    cached_build(directory, lambda staging: (staging / "kubelet").write_text("whole"))
    assert (directory / "kubelet").read_text() == "whole"


def test_an_incomplete_entry_is_built_again(tmp_path: Path) -> None:
    """An entry without its marker (a build from before markers, a copy cut short) or missing
    what the harness expects inside is replaced, not reused."""
    directory = tmp_path / "argo" / "00000000000000aa"
    directory.mkdir(parents=True)
    (directory / "stale").write_text("")
    (staging_dir(directory)).mkdir()
    (staging_dir(directory) / "leftover").write_text("")  # a build killed mid-way

    def has_tool(d: Path) -> bool:
        return (d / "tool").exists()

    assert not is_complete(directory, has_tool)
    cached_build(directory, lambda staging: (staging / "tool").write_text(""), contents=has_tool)
    assert sorted(p.name for p in directory.iterdir()) == [COMPLETE_MARKER, "tool"]
    (directory / "tool").unlink()  # marker but not the contents
    cached_build(directory, lambda staging: (staging / "tool").write_text("again"), contents=has_tool)
    assert (directory / "tool").read_text() == "again"


_BUILDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tests.helpers.build_cache import cached_build

    work = Path(sys.argv[2])
    def build_into(staging):
        with open(work / "builds", "a") as count:
            count.write(sys.argv[3] + "\\n")
        (work / ("started-" + sys.argv[3])).touch()
        while not (work / "release").exists():  # the test says when the build may end
            time.sleep(0.02)
        (staging / "tool").write_text(sys.argv[3])
    cached_build(work / "cache" / "key", build_into, up_to_date="up to date")
""")


def test_a_second_caller_waits_for_the_lock_and_reuses_the_result(tmp_path: Path) -> None:
    def start(name: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-c", _BUILDER, str(ROOT), str(tmp_path), name],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_for(path: Path) -> None:
        deadline = time.monotonic() + 30
        while not path.exists():
            assert time.monotonic() < deadline, f"{path.name} never appeared"
            time.sleep(0.02)

    first = start("first")
    try:
        wait_for(tmp_path / "started-first")
        second = start("second")
        try:
            time.sleep(1.0)  # room to start, import and reach the lock
            assert second.poll() is None, second.communicate()  # waiting for the first build's lock
            assert not (tmp_path / "cache" / "key").exists()
            (tmp_path / "release").touch()
            out, err = second.communicate(timeout=30)
        finally:
            second.kill()
        assert second.returncode == 0, err
        assert out.strip() == f"up to date: {tmp_path / 'cache' / 'key'}"
        assert first.wait(timeout=30) == 0
    finally:
        first.kill()
    assert (tmp_path / "builds").read_text() == "first\n"
    assert (tmp_path / "cache" / "key" / "tool").read_text() == "first"
