"""The stop signals (SIGTERM from an orchestrator, SIGINT from Ctrl-C, SIGHUP from a closed
terminal or a dropped SSH session) taken over for a block: one place for the
save-install-restore that the waiting train step, the reap sweeper and the Argo launcher each
need."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["STOP_SIGNALS", "stop_signals_handled_by"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Taken over only where not ignored: `nohup vpipe train ...` asks for the job to outlive the
# terminal, and a closed terminal must not then cancel it.
_KEEP_IGNORED = frozenset({signal.SIGHUP})

Handler = Callable[[int, Any], None] | int | signal.Handlers


@contextmanager
def stop_signals_handled_by(handler: Handler) -> Iterator[None]:
    """SIGTERM, SIGINT and SIGHUP go to `handler` (a function, or signal.SIG_IGN) until the
    block ends; the previous handlers come back however it ends. Main thread only (Python's
    rule)."""
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS
                if sig not in _KEEP_IGNORED or signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
