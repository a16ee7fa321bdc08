"""The one backoff every retry and every resumed watch waits by: capped exponential, with
optional jitter (many workers retrying one NameNode should not retry in step)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

__all__ = ["delay", "delays"]


def delay(attempt: int, first: float, cap: float, *, jitter: bool = False,
          rand: Callable[[], float] = random.random) -> float:
    """The wait after failed attempt `attempt` (1, 2, ...): first * 2^(attempt-1), at most
    `cap`; with jitter, a random 50-100 % of that."""
    base = min(cap, first * 2.0 ** min(attempt - 1, 64))
    return base * (0.5 + rand() / 2) if jitter else base


def delays(first: float, cap: float, *, jitter: bool = False) -> Iterator[float]:
    """The waits after attempts 1, 2, 3, ..., without end."""
    attempt = 0
    while True:
        attempt += 1
        yield delay(attempt, first, cap, jitter=jitter)
