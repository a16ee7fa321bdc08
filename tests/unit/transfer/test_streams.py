"""transfer/streams.py: the read slots large files share (`--streams`), and the executor
keeping to them: one large file alone is read as several ranges, many large files a few
at a time with one range each, and small files are not held back by them."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.ranges import _RangeReader, _RangeSource
from tests.storage.trees import read_tree, temp_files
from volcano_pipelines.transfer import copy as copy_mod
from volcano_pipelines.transfer.copy import Abandoned
from volcano_pipelines.transfer.executor import Executor, Options
from volcano_pipelines.transfer.plan import build_plan
from volcano_pipelines.transfer.streams import StreamBudget, read_slots, split_workers


def test_a_file_alone_takes_every_slot_it_can_use() -> None:
    budget = StreamBudget(4, large_files=1)
    assert budget.take(4) == 4 and budget.free == 0
    budget.give(4)
    assert budget.free == 4


def test_a_file_takes_no_more_ranges_than_it_can_use() -> None:
    budget = StreamBudget(4, large_files=1)
    assert budget.take(2) == 2 and budget.free == 2


def test_files_share_the_slots_fairly_and_the_last_ones_get_more() -> None:
    budget = StreamBudget(4, large_files=8)
    assert [budget.take(4) for _ in range(4)] == [1, 1, 1, 1]  # 8 left: one slot each
    for _ in range(4):
        budget.give(1)  # four read to the end: 4 left
    assert budget.take(4) == 1
    budget.give(1)
    budget.give(0)  # 2 left (a finished file's count goes whatever it held)
    assert budget.take(4) == 2  # 4 slots / 2 files left
    budget.give(2)
    assert budget.take(4) == 4  # the last file: all of them


def test_a_failed_read_still_counts_as_left() -> None:
    budget = StreamBudget(4, large_files=2)
    assert budget.take(4) == 2
    budget.give(2, finished=False)  # to be tried again
    assert budget.take(4) == 2


def test_take_waits_for_a_free_slot() -> None:
    budget = StreamBudget(1, large_files=2)
    assert budget.take(1) == 1
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(budget.take(1)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and got == []  # no slot yet
    budget.give(1)
    waiter.join(5)
    assert got == [1]


def test_a_second_ctrl_c_ends_the_wait() -> None:
    budget = StreamBudget(1, large_files=2)
    budget.take(1)
    abandon = threading.Event()
    abandon.set()
    with pytest.raises(Abandoned):
        budget.take(1, abandon)


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError):
        StreamBudget(0, large_files=1)


class _Counting:
    """Range reads in flight, across files: the highest count seen (of ranges, and of the
    files they belong to), and which files were read as how many ranges. Each read waits a little before its first packet, so reads
    that are allowed to overlap do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = self.most_files = 0
        self.active: dict[str, int] = {}  # file -> its ranges being read
        self.ranges: dict[str, int] = {}

    def wrap(self, name: str, stream: Iterator[bytes]) -> Iterator[bytes]:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.ranges[name] = self.ranges.get(name, 0) + 1
            self.active[name] = self.active.get(name, 0) + 1
            self.most_files = max(self.most_files, sum(1 for n in self.active.values() if n))
        try:
            time.sleep(0.05)
            yield from stream
        finally:
            with self.lock:
                self.now -= 1
                self.active[name] -= 1


class _CountingSource(_RangeSource):
    def __init__(self, root: str, counting: _Counting) -> None:
        super().__init__(root)
        self.counting = counting

    def open(self, rel: str):  # type: ignore[no-untyped-def]
        reader = _RangeReader(self._abs(rel), self.ranges)
        plain = reader.range_stream
        reader.range_stream = lambda off, n: self.counting.wrap(rel, plain(off, n))  # type: ignore[method-assign]
        return reader


def _copy(tmp_path: Path, files: dict[str, bytes], **options: int) -> tuple[_Counting, Path]:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    for name, data in files.items():
        (src / name).write_bytes(data)
    counting = _Counting()
    source = _CountingSource(str(src), counting)
    entries, refused = source.list()
    outcomes = Executor(source, str(dst), Options(chunk_size=1 << 20, **options)).run(build_plan(entries, [], rejected=refused))
    assert {o.result for o in outcomes} == {"copied"}
    assert read_tree(dst) == files and temp_files(dst) == []
    return counting, dst


def test_many_large_files_are_read_streams_at_a_time_one_range_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copy_mod, "MIN_RANGE", 1 << 20)
    files = {f"big{i}.bin": os.urandom(4 << 20) for i in range(8)}
    counting, _ = _copy(tmp_path, files, transfers=32, streams=4)
    assert counting.most == 4  # not 8 files x 4 ranges
    # Eight files for four slots: one range each until the last few, which may take more.
    assert sum(counting.ranges.values()) < 8 + 4 and all(n >= 1 for n in counting.ranges.values())


def test_one_large_file_alone_is_read_as_every_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copy_mod, "MIN_RANGE", 1 << 20)
    files = {"big.bin": os.urandom((4 << 20) + 5)} | {f"s{i}.txt": os.urandom(100) for i in range(20)}
    counting, _ = _copy(tmp_path, files, transfers=32, streams=4)
    assert counting.ranges["big.bin"] == 4 and counting.most == 4


def test_transfers_bound_the_files_in_flight_with_large_and_small_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copy_mod, "MIN_RANGE", 1 << 20)
    files = {f"big{i}.bin": os.urandom(2 << 20) for i in range(3)} | {f"s{i}.txt": b"x" for i in range(5)}
    counting, _ = _copy(tmp_path, files, transfers=1, streams=4)
    assert counting.most_files == 1  # one file at a time, as asked (its ranges may overlap)


def test_split_workers_keeps_to_transfers_and_gives_small_files_their_own() -> None:
    assert split_workers(32, 4, large=8, files=8) == (4, 0)  # only large files: the one pool, 4 workers
    assert split_workers(32, 4, large=8, files=10_008) == (28, 4)  # mixed: 28 for every file, 4 for large ones
    assert split_workers(32, 4, large=2, files=100) == (30, 2)
    assert split_workers(1, 4, large=3, files=8) == (1, 0)  # --transfers 1: one pool of one
    assert split_workers(4, 4, large=10, files=20) == (4, 0)  # no room to split


def test_read_slots_without_a_budget_is_one_range() -> None:
    with read_slots(None, 1 << 40, 4, threading.Event()) as n:
        assert n == 1


def test_read_slots_asks_no_more_ranges_than_the_file_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copy_mod, "MIN_RANGE", 10)
    budget = StreamBudget(4, large_files=1)
    with read_slots(budget, 25, 4, threading.Event()) as n:
        assert n == 2 and budget.free == 2  # 25 bytes: two ranges of at least 10
    assert budget.free == 4


def test_read_slots_returns_them_when_the_read_fails() -> None:
    budget = StreamBudget(4, large_files=2)
    with pytest.raises(OSError), read_slots(budget, 1 << 30, 4, threading.Event()):
        raise OSError("read failed")
    assert budget.free == 4
    assert budget.take(4) == 2  # the failed file still counts as left: 4 slots / 2 files
