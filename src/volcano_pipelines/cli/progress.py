"""Drawing a step's progress on a terminal: a live view drawn by rich (a per-task table while a
job runs, a bar while files copy). In logs (not a terminal): progress.LineProgress."""

from __future__ import annotations

import threading
import time
from typing import Any, TextIO

from volcano_pipelines.progress import LineProgress, Progress, configure_logging
from volcano_pipelines.volcano.report_lines import TrainingProgress
from volcano_pipelines.volcano.summary import training_figures
from volcano_pipelines.volcano.status import JobStatus

__all__ = ["RichProgress", "configure_logging", "make_progress"]

def make_progress(stream: TextIO, *, quiet: bool = False) -> Progress:
    if quiet:
        return Progress()
    if stream.isatty():
        return RichProgress(stream)
    return LineProgress(stream)


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
        self.table: Any = None  # the job's task table
        self.training_bar: Any = None  # the training's progress bar, under the table
        self.training_id: Any = None

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
            self.table = table
            self._redraw()

    def _redraw(self) -> None:
        from rich.console import Group

        parts = [part for part in (self.table, self.training_bar) if part is not None]
        self.live.update(Group(*parts), refresh=True)

    def training(self, name: str, state: TrainingProgress) -> None:
        from rich.progress import BarColumn, Progress as Bar, TaskProgressColumn, TextColumn

        with self.lock:
            if self.training_bar is None:
                self.training_bar = Bar(TextColumn("training"), BarColumn(), TaskProgressColumn(),
                                        TextColumn("{task.fields[figures]}"), console=self.console,
                                        auto_refresh=False)
                self.training_id = self.training_bar.add_task("training", total=state.total or None, figures="")
            self.training_bar.update(self.training_id, completed=state.step or 0, total=state.total or None,
                                     figures=", ".join(training_figures(state, short=True)))
            self._start()
            self._redraw()

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
