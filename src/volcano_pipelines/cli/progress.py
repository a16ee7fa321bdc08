"""Drawing a step's progress (volcano_pipelines.progress.Progress): on a terminal, a live view
drawn by rich (a per-task table while a job runs, a bar while files copy); in logs, plain
timestamped lines when something changed, plus a heartbeat so a quiet job still shows life."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, TextIO

from volcano_pipelines.progress import Progress
from volcano_pipelines.volcano.status import JobStatus, format_progress

__all__ = ["LineProgress", "RichProgress", "configure_logging", "make_progress"]

HEARTBEAT_SECONDS = 60.0
FILES_EVERY_SECONDS = 10.0


def configure_logging(*, quiet: bool = False, verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    # The client's own chatter (retries, connection pool) is noise for users.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


def make_progress(stream: TextIO, *, quiet: bool = False) -> Progress:
    if quiet:
        return Progress()
    if stream.isatty():
        return RichProgress(stream)
    return LineProgress(stream)


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _files_line(files_done: int, files_total: int, bytes_done: int, bytes_total: int, elapsed: float) -> str:
    pct = 100.0 * bytes_done / bytes_total if bytes_total else (100.0 if files_done >= files_total else 0.0)
    return (f"files {files_done}/{files_total}, {bytes_done / 1e6:.1f}/{bytes_total / 1e6:.1f} MB ({pct:.1f}%), "
            f"{bytes_done / 1e6 / max(elapsed, 1e-6):.1f} MB/s")


class LineProgress(Progress):
    """For logs: one line per change, never a carriage return."""

    def __init__(self, stream: TextIO, *, clock: Any = time.monotonic) -> None:
        self.stream = stream
        self.clock = clock
        self.started = clock()
        self.lock = threading.Lock()
        self.last_line = ""
        self.last_print: float | None = None
        self.last_files: float | None = None
        self.files_state: tuple[int, int, int, int] | None = None

    def _write(self, line: str) -> None:
        self.stream.write(f"{_stamp()} {line}\n")
        self.stream.flush()

    def note(self, line: str) -> None:
        with self.lock:
            self._write(line)

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        line = format_progress(name, status, problem)
        now = self.clock()
        with self.lock:
            if line != self.last_line or self.last_print is None or now - self.last_print >= HEARTBEAT_SECONDS:
                self._write(line)
                self.last_print = now
            self.last_line = line

    def files(self, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        now = self.clock()
        with self.lock:
            self.files_state = (files_done, files_total, bytes_done, bytes_total)
            if self.last_files is not None and now - self.last_files < FILES_EVERY_SECONDS:
                return
            self.last_files = now
            self._write("sync " + _files_line(*self.files_state, now - self.started))

    def close(self) -> None:
        with self.lock:
            if self.files_state is not None and self.last_files is not None:
                self._write("sync " + _files_line(*self.files_state, self.clock() - self.started))


class RichProgress(Progress):
    """For people at a terminal: one live region, redrawn in place."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=stream)
        self.live = Live(console=self.console, auto_refresh=False, transient=False)
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.bar: Any = None
        self.task_id: Any = None
        self.running = False

    def _start(self) -> None:
        if not self.running:
            self.live.start()
            self.running = True

    def note(self, line: str) -> None:
        with self.lock:
            self.console.print(line, markup=False, highlight=False)

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        from rich.table import Table

        table = Table(title=f"job {name}: {status.phase}" + (f" (retries {status.retries})" if status.retries else ""),
                      title_justify="left", caption=f"waiting: {problem}" if problem else None, caption_justify="left")
        for column in ("task", "running", "succeeded", "failed", "pending"):
            table.add_column(column, justify="left" if column == "task" else "right")
        for task, c in status.tasks.items():
            table.add_row(task, str(c.running), str(c.succeeded), str(c.failed), str(c.pending))
        with self.lock:
            self._start()
            self.live.update(table, refresh=True)

    def files(self, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress as Bar, TextColumn, TransferSpeedColumn

        with self.lock:
            if self.bar is None:
                self.bar = Bar(TextColumn("sync"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                               TextColumn("{task.fields[files]}"), console=self.console, auto_refresh=False)
                self.task_id = self.bar.add_task("sync", total=bytes_total or None, files="")
                self._start()
            self.bar.update(self.task_id, completed=bytes_done, total=bytes_total or None,
                            files=f"files {files_done}/{files_total}")
            self.live.update(self.bar, refresh=True)

    def close(self) -> None:
        with self.lock:
            if self.running:
                self.live.stop()
                self.running = False
