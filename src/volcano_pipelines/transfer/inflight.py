"""The transfers in flight, as the second Ctrl-C (or SIGTERM) sees them: their temporary files,
and the executor's wait for each, which gives up on one that has not ended ABANDON_GRACE_S after
the signal. A transfer checks for the signal between chunks; one inside a source read (a stalled
source, or a slow one: hdfs-native's and http.client's reads return when their buffer is full)
would otherwise hold the run and its destination lock for as long as the source takes. Its
temporary file is removed here instead, as it would have removed it; a late write goes to the
removed file and its rename then fails."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

__all__ = ["ABANDON_GRACE_S", "InFlight", "LeftBehind", "THREAD_PREFIXES", "sigint_calls", "threads_left_behind"]
log = logging.getLogger(__name__)
T = TypeVar("T")

ABANDON_GRACE_S = 1.0
THREAD_PREFIXES = ("sync_", "sync-large_", "sync-range_")  # the names of the executor's transfer threads


def threads_left_behind() -> bool:
    """Transfer threads of this process are still running (inside a source read the run stopped
    waiting for): the process can only end without waiting for them (os._exit)."""
    return any(t.is_alive() and t.name.startswith(THREAD_PREFIXES) for t in threading.enumerate())


class LeftBehind(Exception):
    """A transfer the run stopped waiting for."""


class InFlight:
    def __init__(self, abandon: threading.Event, notify: Callable[[str], None]) -> None:
        self.abandon = abandon
        self.notify = notify
        self.left_behind = 0  # transfers given up on
        self._abandoned_at: float | None = None
        self._temps: set[str] = set()
        self._lock = threading.Lock()

    def abandoning(self) -> None:
        """The second signal (a signal handler: flags only)."""
        self._abandoned_at = time.monotonic()
        self.abandon.set()

    def started(self, tmp: str) -> None:
        with self._lock:
            self._temps.add(tmp)

    def ended(self, tmp: str) -> None:
        """`tmp` renamed, handed over or removed by its transfer."""
        with self._lock:
            self._temps.discard(tmp)

    def result(self, future: Future[T]) -> T:
        """The future's result; LeftBehind when it has not ended ABANDON_GRACE_S after the second
        signal. Polled: a plain wait would not notice the signal."""
        while True:
            try:
                return future.result(timeout=0.1)
            except FutureTimeout:
                pass
            if self.abandon.is_set():
                since = self._abandoned_at = self._abandoned_at or time.monotonic()
                if time.monotonic() - since >= ABANDON_GRACE_S:
                    self.left_behind += 1
                    raise LeftBehind() from None

    def remove_left_temps(self) -> None:
        """The temporary files of the transfers given up on (once every other one has ended)."""
        with self._lock:
            temps, self._temps = sorted(self._temps), set()
        for tmp in temps:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            except OSError as err:
                log.warning("could not remove temporary file %s: %s", tmp, err)
        self.notify(f"left {self.left_behind} transfer(s) waiting on the source behind; their temporary files are removed")


@contextlib.contextmanager
def sigint_calls(handler: Callable[[], None]) -> Iterator[None]:
    """While the transfer threads run, Ctrl-C calls `handler` instead of raising
    KeyboardInterrupt in the main thread: a KeyboardInterrupt there would leave the
    destination lock while the threads still write. Only when Python's default SIGINT
    handler is in place (a caller's own handler is left alone) and in the main thread
    (SIGINT is delivered to no other)."""
    previous = None
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: handler())
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
