"""The patched hdfs-native's `write_to` (0.14.7+vpipe.2): a range stream that writes its packets into
the destination itself (pwritev from its own buffers) is used that way unless a digest needs the
bytes; its write errors are the destination's; and the early flush of `file` / `batch` leaves a
file's last bytes to the final flush (docs/sync.md)."""

from __future__ import annotations

import errno
import hashlib
import os
import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.ranges import _RangeReader
from volcano_pipelines.transfer import copy as copy_mod
from volcano_pipelines.transfer.copy import DestinationError, copy_stream
from volcano_pipelines.transfer.durability import FlushBehind
from volcano_pipelines.transfer.hdfs_readers import HdfsBufferReader


class _WriteTo(_RangeReader):
    """Range streams with `write_to` (what they wrote, per call, in `calls`) and `readinto`."""

    def __init__(self, path: str, log: list[tuple[int, int]], fail: OSError | None = None) -> None:
        super().__init__(path, log)
        self.calls: list[tuple[str, int]] = []
        self.fail = fail

    def range_reader(self, offset: int, length: int) -> Any:
        self.log.append((offset, length))
        fd, end, outer = self.fd, offset + length, self

        class Stream:
            def readinto(self, buf: Any) -> int:
                nonlocal offset
                n = os.preadv(fd, [memoryview(buf)[:max(0, end - offset)]], offset)
                offset += n
                outer.calls.append(("readinto", n))
                return n

            def write_to(self, out: int, at: int, limit: int) -> int:
                nonlocal offset
                if outer.fail is not None:
                    raise DestinationError(outer.fail)
                data = os.pread(fd, min(limit, end - offset), offset)
                offset += len(data)
                os.pwrite(out, data, at)
                outer.calls.append(("write_to", len(data)))
                return len(data)

        return Stream()


def _copy(tmp_path: Path, data: bytes, *, streams: int, digest: Any = None, fail: OSError | None = None) -> _WriteTo:
    (tmp_path / "src").write_bytes(data)
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with _WriteTo(str(tmp_path / "src"), [], fail) as reader, ThreadPoolExecutor(4) as pool:
            copy_stream(reader, out, len(data), chunk_size=1 << 20, streams=streams, pool=pool,
                        on_bytes=lambda n: None, abandon=threading.Event(), digest=digest)
    finally:
        os.close(out)
    return reader


def test_a_stream_that_writes_itself_is_written_through_write_to_at_each_ranges_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copy_mod, "MIN_RANGE", 1 << 20)
    data = os.urandom((4 << 20) + 999)
    reader = _copy(tmp_path, data, streams=4)
    assert (tmp_path / "out").read_bytes() == data
    assert len(reader.log) == 4 and {kind for kind, _ in reader.calls} == {"write_to"}
    assert max(n for _, n in reader.calls) <= copy_mod.RANGE_BUFFER


def test_a_digest_reads_the_bytes_through_readinto(tmp_path: Path) -> None:
    data = os.urandom((2 << 20) + 5)
    digest = hashlib.sha256()
    reader = _copy(tmp_path, data, streams=4, digest=digest)
    assert (tmp_path / "out").read_bytes() == data and digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert len(reader.log) == 1 and {kind for kind, _ in reader.calls} == {"readinto"}


def test_a_failed_write_to_is_a_destination_error(tmp_path: Path) -> None:
    with pytest.raises(DestinationError) as info:
        _copy(tmp_path, os.urandom(3 << 20), streams=1, fail=OSError(errno.ENOSPC, "No space left on device"))
    assert info.value.errno == errno.ENOSPC


def test_the_bindings_write_error_becomes_the_destinations(monkeypatch: pytest.MonkeyPatch) -> None:
    """HdfsBufferReader wraps a range stream that has `write_to`: hdfs_native.WriteError (an OSError
    with the write's errno) is raised as DestinationError, an HDFS error as itself; a stream of an
    older patched wheel (no `write_to`) is used as it is."""

    class WriteError(OSError):
        pass

    monkeypatch.setitem(sys.modules, "hdfs_native", types.SimpleNamespace(WriteError=WriteError))

    class Stream:
        def __init__(self, error: Exception) -> None:
            self.error = error

        def readinto(self, buf: Any) -> int:
            return 0

        def write_to(self, fd: int, offset: int, limit: int) -> int:
            raise self.error

    class Reader:
        def __init__(self, stream: Any) -> None:
            self.stream = stream

        def read_range_stream(self, offset: int, length: int) -> Any:
            return self.stream

    wrapped = HdfsBufferReader(Reader(Stream(WriteError(errno.EDQUOT, "Disk quota exceeded")))).range_reader(0, 1)
    with pytest.raises(DestinationError) as info:
        wrapped.write_to(3, 0, 1 << 20)
    assert info.value.errno == errno.EDQUOT
    assert wrapped.readinto(bytearray(1)) == 0
    source_error = ConnectionResetError(errno.ECONNRESET, "reset by the DataNode")
    with pytest.raises(ConnectionResetError):
        HdfsBufferReader(Reader(Stream(source_error))).range_reader(0, 1).write_to(3, 0, 1 << 20)
    old = types.SimpleNamespace(readinto=lambda buf: 0)
    assert HdfsBufferReader(Reader(old)).range_reader(0, 1) is old


def test_the_files_last_bytes_start_no_early_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The final flush covers them, after the transfer thread has handed the file on."""
    flushed = threading.Event()
    monkeypatch.setattr(os, "fdatasync", lambda fd: flushed.set())
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        last = FlushBehind(fd, 10, 20)
        last.wrote(10)  # a mark inside the file: flushed behind the copy
        assert flushed.wait(5)
        last.finish()
        flushed.clear()
        for size in (10, 15):  # the mark reached by the file's last bytes
            end = FlushBehind(fd, 10, size)
            end.wrote(size)
            end.finish()
        assert not flushed.is_set()
    finally:
        os.close(fd)


def test_an_early_flush_waiting_for_its_turn_is_skipped_when_the_file_is_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another file's flush holds the turn: this file's copy ends meanwhile, and its final
    flush covers the bytes, so `finish()` neither waits for the turn nor flushes."""
    import time

    flushed = threading.Event()
    monkeypatch.setattr(os, "fdatasync", lambda fd: flushed.set())
    turn = threading.Lock()
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        behind = FlushBehind(fd, 10, 30, turn)
        with turn:  # another file's flush in progress
            behind.wrote(10)  # a mark inside the file: its flush waits for the turn
            time.sleep(0.05)
            finisher = threading.Thread(target=behind.finish)
            finisher.start()
            finisher.join(2)
            assert not finisher.is_alive(), "finish() waited for the other file's flush"
        finisher.join()
        assert not flushed.is_set()
        assert turn.acquire(blocking=False)  # not left held
        turn.release()
    finally:
        os.close(fd)
