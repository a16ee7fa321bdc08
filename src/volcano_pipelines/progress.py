"""What a step tells its front end while it works: one small interface for every step. The
default does nothing; the CLI draws it (cli/progress.py: rich on a terminal, timestamped lines
in logs), a KFP or Argo wrapper may log it."""

from __future__ import annotations

from volcano_pipelines.volcano.status import JobStatus

__all__ = ["Progress"]


class Progress:
    def note(self, line: str) -> None:
        """One status line worth keeping (a plan summary, a restart, a warning for users)."""

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        """A training job's phase and per-task counts, and why it waits (if it does)."""

    def files(self, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        """A transfer's totals so far (thread-safe callers: the sync executor's threads)."""

    def close(self) -> None:
        """The step is over: finish any live display."""
