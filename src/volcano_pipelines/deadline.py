"""The one deadline every bounded wait keeps: the step's `timeout` turned into a point in
monotonic time, asked how much is left, whether it has passed, and how long the next wait
may be. The waits (train's job wait, the reap sweeper, a rollout, TF Serving's model status)
each had this arithmetic of their own."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Deadline"]


@dataclass(frozen=True)
class Deadline:
    """`at` on `clock`'s scale (time.monotonic unless a test injects one); None: no limit."""

    at: float | None
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float | None, clock: Callable[[], float] = time.monotonic, *,
              start: float | None = None) -> Deadline:
        """`seconds` from `start` (default: now; the clock is read either way, once). None:
        no limit."""
        begin = clock() if start is None else start
        return cls(None if seconds is None else begin + seconds, clock)

    @property
    def limited(self) -> bool:
        return self.at is not None

    def remaining(self) -> float:
        """Seconds left (negative once past; infinite without a limit, the clock unread)."""
        return math.inf if self.at is None else self.at - self.clock()

    def expired(self, now: float | None = None) -> bool:
        """Past the deadline at `now` (default: the clock's now; never without a limit)."""
        if self.at is None:
            return False
        return (self.clock() if now is None else now) >= self.at

    def clamp(self, seconds: float) -> float:
        """`seconds`, but no wait past the deadline (and never negative)."""
        return min(seconds, max(0.0, self.remaining()))
