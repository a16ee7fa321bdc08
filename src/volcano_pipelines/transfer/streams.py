"""How many large-file reads run at once, across all files (`--streams`).

A large file (one that is streamed: larger than the chunk size) holds one read slot while
its bytes move, and more when it is read as parallel ranges. The slots are shared by the
whole run, so `--streams 4` means four large reads in flight: one file alone is read as
four ranges (rclone's multi-thread streams), eight files are read four at a time, one range
each. Without the bound, `--transfers 32` over eight 128 MiB files ran 32 DataNode readers
at once, and the copier spent about 30 % more CPU per GiB (thread and GIL contention) for no
gain in wall time (benchmarks/sync_bench.py, docs/sync.md). Small files never take a slot:
their cost is the destination's round trips, which many transfers in flight hide.

A file takes a fair share of the slots: all of the free ones when it is the only large file
left, one when there are as many large files left as slots."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from volcano_pipelines.transfer.copy import Abandoned, plan_ranges

__all__ = ["StreamBudget", "read_slots", "split_workers"]

# How often a transfer waiting for a slot looks at the abandon flag (a second Ctrl-C).
POLL_SECONDS = 0.5


class StreamBudget:
    def __init__(self, slots: int, large_files: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, not {slots}")
        self._slots = slots
        self._free = slots
        self._left = max(0, large_files)  # large files not read to the end yet
        self._cond = threading.Condition()

    def take(self, wanted: int, abandon: threading.Event | None = None) -> int:
        """Wait for a free slot, then take up to `wanted` (at least 1): no more than the
        free ones and the file's fair share (slots / large files left). Returns how many
        were taken; `give` them back when the read has ended. Raises Abandoned when
        `abandon` is set while it waits (a second Ctrl-C)."""
        with self._cond:
            while self._free == 0:
                if abandon is not None and abandon.is_set():
                    raise Abandoned()
                self._cond.wait(POLL_SECONDS)
            share = max(1, self._slots // max(1, self._left))
            taken = max(1, min(wanted, self._free, share))
            self._free -= taken
            return taken

    def give(self, taken: int, *, finished: bool = True) -> None:
        """Return `taken` slots; `finished`: the file was read to the end (a read that
        failed passes False: the file may be tried again, and still counts as left)."""
        with self._cond:
            self._free += taken
            if finished:
                self._left = max(0, self._left - 1)
            self._cond.notify_all()

    @property
    def free(self) -> int:
        with self._cond:
            return self._free


@contextmanager
def read_slots(budget: StreamBudget | None, size: int, wanted: int, abandon: threading.Event) -> Iterator[int]:
    """The ranges a file of `size` bytes is read in, within `budget` (held until the block
    ends): up to `wanted`, no more than plan_ranges gives it. No budget (a file that is not
    streamed): one."""
    if budget is None:
        yield 1
        return
    taken = budget.take(len(plan_ranges(size, wanted)), abandon)
    finished = False
    try:
        yield taken
        finished = True
    finally:
        budget.give(taken, finished=finished)


def split_workers(workers: int, slots: int, large: int, files: int) -> tuple[int, int]:
    """(workers for every file, workers of large files alone) for `files` files of which
    `large` are streamed, within `workers` files in flight (--transfers). Large files get no
    more workers than there are read slots, and workers of their own when there are small
    files too, so a large file waiting for a slot never holds a worker a small file could
    use. With too few workers to split, large files share them (and wait for slots there)."""
    large_workers = min(slots, large, workers)
    if large == files:
        return large_workers, 0
    if workers > large_workers:
        return workers - large_workers, large_workers
    return workers, 0
