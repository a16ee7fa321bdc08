"""A clock for code that takes `time.monotonic` and `time.sleep` as arguments: sleeping (or
`advance`) moves the time forward, nothing waits."""

from __future__ import annotations


class VirtualClock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    advance = sleep  # the name the wait-policy tests use: time passes between two polls
