"""The data paths of transfer/copy.py and the `batch` committer, on local files: a source
that streams ranges (as HDFS does) read in several parallel ranges and written with
pwritev, the reused buffer of a local source, a source that holds fewer bytes than
listed, and a batch whose rename fails."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.storage.trees import read_tree, temp_files
from volcano_pipelines.transfer import copy as copy_mod
from volcano_pipelines.transfer.copy import SourceChanged, copy_stream, plan_ranges
from volcano_pipelines.transfer.executor import Executor, Options
from volcano_pipelines.transfer.plan import build_plan
from volcano_pipelines.transfer.sources import LocalSource

PACKET = 64 << 10


class _RangeReader:
    """What sources.py's HDFS reader offers: length() and range_stream(offset, length)."""

    def __init__(self, path: str, log: list[tuple[int, int]]) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.log = log

    def length(self) -> int:
        return os.fstat(self.fd).st_size

    def range_stream(self, offset: int, length: int) -> Iterator[bytes]:
        self.log.append((offset, length))
        end = offset + length
        while offset < end:
            data = os.pread(self.fd, min(PACKET, end - offset), offset)
            if not data:
                return
            offset += len(data)
            yield data

    def read(self, n: int = -1) -> bytes:
        return os.read(self.fd, n if n >= 0 else self.length())

    def __enter__(self) -> _RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


class _RangeSource(LocalSource):
    snapshot_reads = True

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.ranges: list[tuple[int, int]] = []

    def open(self, rel: str):  # type: ignore[no-untyped-def]
        return _RangeReader(self._abs(rel), self.ranges)


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
