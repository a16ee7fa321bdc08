"""A clock for code that takes `time.monotonic` and `time.sleep` as arguments: sleeping moves the
time forward, nothing waits."""

from __future__ import annotations


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
