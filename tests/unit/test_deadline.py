"""The one deadline helper (deadline.py) on an injected clock: what the waits ask of it."""

from __future__ import annotations

import math

from volcano_pipelines.deadline import Deadline


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_a_deadline_counts_down_clamps_waits_and_expires() -> None:
    clock = Clock()
    deadline = Deadline.after(10, clock)
    assert deadline.limited and deadline.at == 110.0
    clock.now = 104.0
    assert deadline.remaining() == 6.0 and deadline.clamp(5.0) == 5.0 and deadline.clamp(8.0) == 6.0
    assert not deadline.expired() and deadline.expired(110.0)
    clock.now = 112.0
    assert deadline.remaining() == -2.0 and deadline.clamp(5.0) == 0.0 and deadline.expired()


def test_a_given_start_is_counted_from_and_the_clock_is_read_once_at_creation() -> None:
    clock = Clock()
    assert Deadline.after(5, clock, start=50.0).at == 55.0 and clock.reads == 0
    Deadline.after(None, clock)
    assert clock.reads == 1  # as the waits read their start time, limit or not


def test_no_limit_never_expires_nor_shortens_a_wait_and_reads_no_clock() -> None:
    clock = Clock()
    deadline = Deadline.after(None, clock, start=0.0)
    assert not deadline.limited and deadline.remaining() == math.inf
    assert deadline.clamp(3.0) == 3.0 and not deadline.expired() and clock.reads == 0
