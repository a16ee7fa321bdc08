"""Drawing a step's progress on a terminal: one live region at the bottom, redrawn in place (the
job's summary, volcano/summary.py, and the training's bar while a job runs; a bar while files
copy), with everything else (the tasks' output, notes, warnings) printed above it as plain
lines that scroll. In logs (not a terminal): progress.LineProgress."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

from volcano_pipelines.progress import LineProgress, Progress, configure_logging

if TYPE_CHECKING:  # `vpipe sync` builds its progress here too and never loads the job readers
    from volcano_pipelines.volcano.report_lines import TrainingProgress
    from volcano_pipelines.volcano.status import JobStatus
    from volcano_pipelines.volcano.summary import JobSummary

__all__ = ["QuietProgress", "RichProgress", "configure_logging", "make_progress"]


def make_progress(stream: TextIO, *, quiet: bool = False) -> Progress:
    if quiet:
        return QuietProgress()
    if stream.isatty():
        return RichProgress(stream)
    return LineProgress(stream)


class QuietProgress(Progress):
    """`-q`: no progress and none of the tasks' output (it stays in the pods' log files); the
    warnings and the result are still printed."""

    def output(self, line: str) -> None:
        pass


class RichProgress(Progress):
    """For people at a terminal: one live region, redrawn in place, and the rest scrolling above
    it. Every write to the terminal goes through one console while the region is live (rich's
    Live moves the region down under each printed line; stdout and stderr are redirected to it,
    and logging writes to the redirected stderr), so nothing is glued to or erased by a redraw."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=stream)
        self.live = Live(console=self.console, auto_refresh=False, transient=False, redirect_stdout=True,
                         redirect_stderr=True)
        self.started = time.monotonic()
        self.lock = threading.RLock()
        self.bar: Any = None
        self.task_id: Any = None
        self.running = False
        self.lines: list[str] = []  # the job's summary (volcano/summary.py)
        self.training_bar: Any = None  # the training's progress bar, under the summary
        self.training_id: Any = None

    def _start(self) -> None:
        if not self.running:
            self.live.start()
            self.running = True

    def _print(self, line: str) -> None:
        # Above the live region (Live re-draws it below), never through it.
        self.console.print(line, markup=False, highlight=False, emoji=False, overflow="ignore", crop=False,
                           soft_wrap=True)

    def note(self, line: str) -> None:
        with self.lock:
            self._print(line)

    def output(self, line: str) -> None:
        from rich.text import Text

        # A task's colours are kept; its other control sequences (a carriage return of a
        # progress bar, cursor moves) would move the cursor under the live region: dropped.
        text = Text.from_ansi(line, no_wrap=False)
        with self.lock:
            self.console.print(text, highlight=False, emoji=False, soft_wrap=True)

    def warn(self, line: str) -> None:
        with self.lock:
            self._print(f"warning: {line}")

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        from volcano_pipelines.volcano.summary import JobSummary

        self.summary(JobSummary.of(name, status, problem))

    def summary(self, summary: JobSummary) -> None:
        with self.lock:
            from volcano_pipelines.volcano.summary import summary_lines

            self.lines = summary_lines(summary)
            self._start()
            self._redraw()

    def _redraw(self) -> None:
        from rich.console import Group
        from rich.text import Text

        parts: list[Any] = [Text(line, no_wrap=True, overflow="ellipsis") for line in self.lines]
        if self.training_bar is not None:
            parts.append(self.training_bar)
        self.live.update(Group(*parts), refresh=True)

    def training(self, name: str, state: TrainingProgress) -> None:
        from rich.progress import BarColumn, Progress as Bar, TaskProgressColumn, TextColumn

        from volcano_pipelines.volcano.summary import training_figures

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
