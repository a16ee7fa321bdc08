"""The stop signals (SIGTERM from an orchestrator, SIGINT from Ctrl-C) taken over for a block:
one place for the save-install-restore that the waiting train step, the reap sweeper and the
Argo launcher each need."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["STOP_SIGNALS", "stop_signals_handled_by"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

Handler = Callable[[int, Any], None] | int | signal.Handlers


@contextmanager
def stop_signals_handled_by(handler: Handler) -> Iterator[None]:
    """SIGTERM and SIGINT go to `handler` (a function, or signal.SIG_IGN) until the block
    ends; the previous handlers come back however it ends. Main thread only (Python's rule)."""
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
