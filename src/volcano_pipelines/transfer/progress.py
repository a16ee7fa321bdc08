"""The transfer's progress: thread-safe counters the executor's threads advance, and the
hooks a front end overrides (steps/_sync.py forwards them to the Progress every step takes;
the CLI draws its own)."""

from __future__ import annotations

import threading

__all__ = ["Progress"]


class Progress:
    """Receives progress from the transfer threads. The default does nothing; front ends
    subclass it (a bar on a terminal, periodic log lines otherwise). Thread-safe totals."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files_total = 0
        self.bytes_total = 0
        self.files_done = 0
        self.bytes_done = 0

    def planned(self, summary: str) -> None:
        """One line on what the run is about to do (after listing and planning)."""

    def start(self, files: int, nbytes: int) -> None:
        self.files_total, self.bytes_total = files, nbytes
        self.changed()

    def advance(self, path: str, nbytes: int) -> None:
        with self.lock:
            self.bytes_done += nbytes
        self.changed()

    def file_done(self, path: str, result: str) -> None:
        with self.lock:
            self.files_done += 1
        self.changed()

    def changed(self) -> None:
        pass

    def stopping(self, message: str) -> None:
        """One line when Ctrl-C stops the run (called from the SIGINT handler: must not
        wait for a lock a transfer thread may hold)."""

    def finish(self) -> None:
        pass
