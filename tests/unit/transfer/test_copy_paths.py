"""The data paths of transfer/copy.py and the `batch` committer, on local files: a source
that streams ranges (as HDFS does) read in several parallel ranges and written with
pwritev, the reused buffer of a local source, a source that holds fewer bytes than
listed, and a batch whose rename fails."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.ranges import _RangeReader, _RangeSource
from tests.storage.trees import read_tree, temp_files
from volcano_pipelines.transfer import copy as copy_mod
from volcano_pipelines.transfer.copy import SourceChanged, copy_stream, plan_ranges
from volcano_pipelines.transfer.executor import Executor, Options
from volcano_pipelines.transfer.plan import build_plan
from volcano_pipelines.transfer.sources import LocalSource


def test_plan_ranges_covers_the_file_exactly() -> None:
    assert plan_ranges(0, 4) == [(0, 0)]
    assert plan_ranges(10, 4, min_range=32) == [(0, 10)]
    assert plan_ranges(128, 4, min_range=32) == [(0, 32), (32, 32), (64, 32), (96, 32)]
    assert plan_ranges(100, 4, min_range=32) == [(0, 34), (34, 34), (68, 32)]
    for size in (1, 31, 32, 33, 1000, 4097):
        ranges = plan_ranges(size, 3, min_range=7)
        assert sum(n for _, n in ranges) == size and ranges[0][0] == 0
        assert all(a + n == b for (a, n), (b, _) in zip(ranges, ranges[1:], strict=False))


def test_a_large_file_is_read_as_parallel_ranges_and_written_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copy_mod, "MIN_RANGE", 1 << 20)
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    files = {"big.bin": os.urandom((4 << 20) + 12345), "small.bin": os.urandom(1000)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    source = _RangeSource(str(src))
    entries, refused = source.list()

    outcomes = Executor(source, str(dst), Options(transfers=2, chunk_size=1 << 20, streams=4)).run(
        build_plan(entries, [], rejected=refused))

    assert {o.path: o.result for o in outcomes} == {"big.bin": "copied", "small.bin": "copied"}
    assert read_tree(dst) == files and temp_files(dst) == []
    big = [r for r in source.ranges if r[1] > 1000]
    assert len(big) == 4 and sum(n for _, n in big) == len(files["big.bin"])  # four streams


def test_a_source_holding_fewer_bytes_than_listed_is_a_change(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * (3 << 20))
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        with _RangeReader(str(path), []) as reader, pytest.raises(SourceChanged):
            copy_stream(reader, out, 4 << 20, chunk_size=1 << 20, streams=4, pool=None,
                        on_bytes=lambda n: None, abandon=threading.Event())
    finally:
        os.close(out)


class _BufferRanges(_RangeReader):
    """The patched hdfs-native's reader: length() and range streams that fill the caller's buffer."""

    def range_reader(self, offset: int, length: int):  # type: ignore[no-untyped-def]
        self.log.append((offset, length))
        fd, end = self.fd, offset + length

        class Stream:
            def readinto(self, buf) -> int:  # type: ignore[no-untyped-def]
                nonlocal offset
                n = os.preadv(fd, [memoryview(buf)[:max(0, end - offset)]], offset)
                offset += n
                return n

        return Stream()


def test_a_range_reader_source_fills_buffers_and_its_length_is_checked_first(tmp_path: Path) -> None:
    data = os.urandom((3 << 20) + 4321)
    path = tmp_path / "f"
    path.write_bytes(data)
    for listed in (len(data), len(data) + 1):
        asked: list[tuple[int, int]] = []
        out_path = tmp_path / f"out-{listed}"
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT)
        try:
            with _BufferRanges(str(path), asked) as reader:
                if listed == len(data):
                    copy_stream(reader, out, listed, chunk_size=1 << 20, streams=1, pool=None,
                                on_bytes=lambda n: None, abandon=threading.Event())
                    assert out_path.read_bytes() == data and asked == [(0, len(data))]
                else:  # a range past the file's end is never asked for (hdfs-native panics on one)
                    with pytest.raises(SourceChanged):
                        copy_stream(reader, out, listed, chunk_size=1 << 20, streams=1, pool=None,
                                    on_bytes=lambda n: None, abandon=threading.Event())
                    assert asked == []
        finally:
            os.close(out)


def test_a_local_file_is_read_into_one_reused_buffer(tmp_path: Path) -> None:
    data = os.urandom((2 << 20) + 7)
    (tmp_path / "f").write_bytes(data)
    seen: list[int] = []
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        with open(tmp_path / "f", "rb", buffering=0) as stream:
            written, reads = copy_stream(stream, out, len(data), chunk_size=1 << 20, streams=4, pool=ThreadPoolExecutor(2),
                                         on_bytes=seen.append, abandon=threading.Event())
    finally:
        os.close(out)
    assert (written, reads) == (len(data), 3) and seen == [1 << 20, 1 << 20, 7]
    assert (tmp_path / "out").read_bytes() == data


def test_a_batch_whose_rename_fails_reports_that_file_and_removes_its_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for name in ("a", "b", "c"):
        (src / name).write_bytes(name.encode() * 10)
    real_replace = os.replace

    def replace(old: str, new: str, **kwargs: object) -> None:
        if new.endswith("/b"):
            raise OSError(5, "Input/output error")
        real_replace(old, new, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", replace)
    source = LocalSource(str(src))
    entries, refused = source.list()
    done: list[tuple[str, str]] = []
    outcomes = {o.path: o for o in Executor(source, str(dst), Options(transfers=2, durability="batch"),
                                            done=lambda p, r: done.append((p, r))).run(build_plan(entries, [], rejected=refused))}

    assert (outcomes["a"].result, outcomes["c"].result, outcomes["b"].result) == ("copied", "copied", "failed")
    assert "Input/output error" in (outcomes["b"].error or "")
    assert read_tree(dst) == {"a": b"a" * 10, "c": b"c" * 10} and temp_files(dst) == []
    assert sorted(done) == [("a", "copied"), ("b", "failed"), ("c", "copied")]  # each reported once


def _flush_recorder(monkeypatch: pytest.MonkeyPatch, delay: float = 0.0, error: OSError | None = None) -> list[tuple[int, str, float, float]]:
    """os.fdatasync in transfer/copy.py replaced: records (bytes in the file then, thread
    name, start, end) of every call; sleeps `delay`; raises `error` when given."""
    import time

    calls: list[tuple[int, str, float, float]] = []

    def fdatasync(fd: int) -> None:
        started = time.monotonic()
        size = os.fstat(fd).st_size
        time.sleep(delay)
        calls.append((size, threading.current_thread().name, started, time.monotonic()))
        if error is not None:
            raise error

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return calls


def _copy_big(tmp_path: Path, size: int, flush_every: int, streams: int = 1, pace: float = 0.0) -> tuple[float, bytes]:
    """Copy `size` random bytes with copy_stream; `pace`: seconds per 64 KiB packet written
    (a copy that takes a while). Returns when it returned and the bytes."""
    import time

    data = os.urandom(size)
    (tmp_path / "src").write_bytes(data)
    fd = os.open(tmp_path / "dst", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        with _RangeReader(str(tmp_path / "src"), []) as reader, ThreadPoolExecutor(4) as pool:
            copy_stream(reader, fd, size, chunk_size=64 << 10, streams=streams, pool=pool,
                        on_bytes=lambda n: time.sleep(pace), abandon=threading.Event(), flush_every=flush_every)
        returned = time.monotonic()
    finally:
        os.close(fd)
    assert (tmp_path / "dst").read_bytes() == data
    return returned, data


def test_a_large_file_is_flushed_behind_the_copy_in_a_thread_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`file` / `batch`: the bytes already written go to disk while the copy goes on (the final
    flush before the rename has only the rest left); the writing thread does not wait for them."""
    calls = _flush_recorder(monkeypatch, delay=0.05)
    returned, _ = _copy_big(tmp_path, 8 << 20, flush_every=1 << 20, pace=0.002)
    assert calls, "no early flush"
    assert all(name == "flush-behind" for _, name, _, _ in calls)
    assert any(size < (8 << 20) for size, _, _, _ in calls)  # while the copy was still writing
    # Marks that came due while a flush ran are one flush after it, not one per mark.
    assert len(calls) < 8
    assert max(end for _, _, _, end in calls) <= returned  # the descriptor is closed after the last one


def test_no_early_flush_for_a_file_under_the_mark_or_when_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _flush_recorder(monkeypatch)
    _copy_big(tmp_path, 3 << 20, flush_every=4 << 20)
    _copy_big(tmp_path, 3 << 20, flush_every=0)
    assert calls == []


def test_a_failed_early_flush_fails_the_copy_as_a_destination_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    _flush_recorder(monkeypatch, error=OSError(errno.EIO, "Input/output error"))
    with pytest.raises(copy_mod.DestinationError) as info:
        _copy_big(tmp_path, 8 << 20, flush_every=1 << 20, streams=4)
    assert info.value.errno == errno.EIO


def test_the_executor_flushes_large_files_early_unless_durability_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    calls = _flush_recorder(monkeypatch)
    write = copy_mod._pwrite_all

    def slow_write(*args: object) -> None:  # a copy that takes a while (an early flush not yet
        time.sleep(0.002)                     # started when the copy ends is left to the final one)
        write(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(copy_mod, "_pwrite_all", slow_write)
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(3 << 20))
    source = _RangeSource(str(src))
    for durability, flushed in (("none", False), ("batch", True), ("file", True)):
        dst = tmp_path / durability
        dst.mkdir()
        calls.clear()
        entries, refused = source.list()
        Executor(source, str(dst), Options(chunk_size=1 << 20, durability=durability, flush_every=1 << 20)).run(
            build_plan(entries, [], rejected=refused))
        assert read_tree(dst) == read_tree(src)
        assert bool(calls) == flushed, durability


def test_the_runs_early_flushes_take_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files copied side by side reach their marks together; on FUSE a file's fsync holds its
    inode lock, so flushing them all at once would stop every writer: one at a time."""
    import time

    flushes: list[tuple[int, float, float]] = []  # (descriptor, start, end)
    lock = threading.Lock()

    def fdatasync(fd: int) -> None:
        started = time.monotonic()
        time.sleep(0.02)
        with lock:
            flushes.append((fd, started, time.monotonic()))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    write = copy_mod._pwrite_all

    def slow_write(*args: object) -> None:  # four copies long enough to overlap
        time.sleep(0.005)
        write(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(copy_mod, "_pwrite_all", slow_write)
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"f{i}.bin").write_bytes(os.urandom(4 << 20))
    source = _RangeSource(str(src))
    entries, refused = source.list()
    dst = tmp_path / "dst"
    dst.mkdir()
    Executor(source, str(dst), Options(transfers=4, chunk_size=256 << 10, durability="batch", flush_every=1 << 20)).run(
        build_plan(entries, [], rejected=refused))

    assert read_tree(dst) == read_tree(src)
    assert len({fd for fd, _, _ in flushes}) >= 2, flushes  # several files were flushed early
    spans = sorted((start, end) for _, start, end in flushes)
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False)), spans
