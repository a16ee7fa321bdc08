"""What a step tells its front end while it works: one small interface for every step. The
default does nothing; LineProgress writes timestamped lines for logs (a step pod in KFP or
Argo, a CI job), only when something changed plus a heartbeat so a quiet job still shows
life; the CLI draws a live view on a terminal (cli/progress.py)."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # a sync reports through this module too and never loads the job readers
    from volcano_pipelines.volcano.report_lines import TrainingProgress
    from volcano_pipelines.volcano.status import JobStatus
    from volcano_pipelines.volcano.summary import JobSummary

__all__ = ["LineProgress", "Progress", "configure_logging"]


class Progress:
    def note(self, line: str) -> None:
        """One status line worth keeping (a plan summary, a restart, a warning for users)."""

    def warn(self, line: str) -> None:
        """A warning for people (a pod evicted, a restart and its cause), said once: logged as a
        WARNING here (library use); a front end's Progress shows it its own way instead (it was
        logged and noted both: every warning twice, in two formats)."""
        logging.getLogger("volcano_pipelines").warning("%s", line)

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        """A training job's phase and per-task counts, and why it waits (if it does)."""

    def summary(self, summary: JobSummary) -> None:
        """The job at a glance (volcano/summary.py), after each job(): what the counts cannot
        say (the pods not as they should be and why, the restarts' causes, stalled tasks)."""

    def files(self, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        """A transfer's totals so far (thread-safe callers: the sync executor's threads)."""

    def training(self, name: str, state: TrainingProgress) -> None:
        """What a training job reported (step / total, rate, loss, ETA, last checkpoint), called
        when it changed."""

    def output(self, line: str) -> None:
        """One line of the job's own output (the local backend's tasks, `worker-0 | ...`): by
        default to stderr, beside the step's messages; a live display prints it above itself,
        `-q` drops it (it is in the pods' log files either way)."""
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed stream must not stop the tasks
            pass

    def close(self) -> None:
        """The step is over: finish any live display."""


HEARTBEAT_SECONDS = 60.0
FILES_EVERY_SECONDS = 10.0


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a record comes, not to the stream of the moment it
    was made: a live display that redirects stderr (rich's Live) then prints a warning above
    itself instead of through its drawing."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def configure_logging(*, quiet: bool = False, verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, handlers=[_StderrHandler()], format="%(asctime)s %(levelname)s %(message)s")
    # The client's own chatter (retries, connection pool) is noise for users.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


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
        self.last_details: list[str] = []

    def _write(self, line: str) -> None:
        self.stream.write(f"{_stamp()} {line}\n")
        self.stream.flush()

    def note(self, line: str) -> None:
        with self.lock:
            self._write(line)

    def warn(self, line: str) -> None:
        with self.lock:
            self._write(f"WARNING {line}")

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        from volcano_pipelines.volcano.status import format_progress

        line = format_progress(name, status, problem)
        now = self.clock()
        with self.lock:
            if line != self.last_line or self.last_print is None or now - self.last_print >= HEARTBEAT_SECONDS:
                self._write(line)
                self.last_print = now
            self.last_line = line

    def summary(self, summary: JobSummary) -> None:
        # Beside the one-line counts: the details, each time they change (bounded, volcano/summary.py).
        from volcano_pipelines.volcano.summary import summary_details

        details = summary_details(summary)
        with self.lock:
            if details != self.last_details:
                for line in details:
                    self._write(f"job {summary.name}: {line}")
            self.last_details = details

    def training(self, name: str, state: TrainingProgress) -> None:
        # The follower calls this only when the figures changed, at most once per read.
        from volcano_pipelines.volcano.summary import format_training

        self.note(format_training(name, state))

    def output(self, line: str) -> None:
        with self.lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

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
