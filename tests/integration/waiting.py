"""Polling helper for integration tests that watch a cluster converge."""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Callable


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 90, interval: float = 0.25,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Call `check` until it returns something truthy and return that; fail after `timeout`
    seconds naming `what` (and `explain()`, e.g. the cluster state, when given)."""
    end = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > end:
            detail = f"\n{explain()}" if explain else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)
