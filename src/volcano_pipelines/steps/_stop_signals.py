"""SIGTERM (a cancelled pipeline) and SIGINT (Ctrl-C) while a step waits on its job: turned
into StopSignal in the main thread, which the wait answers by cleaning up per on_cancel; while
it stops the job, a second signal hurries the tasks (the local backend)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from volcano_pipelines.backends.base import JobSession
from volcano_pipelines.errors import WorkFailed
from volcano_pipelines.progress import Progress
from volcano_pipelines.signals import stop_signals_handled_by

__all__ = ["Cancelled", "StopSignal", "hurry_on_signal", "stop_signals"]


class Cancelled(WorkFailed):
    """The step was asked to stop (SIGTERM from a cancelled pipeline, or Ctrl-C)."""


class StopSignal(BaseException):
    """A stop signal, raised by its handler in the main thread wherever that thread is. Not an
    Exception, as KeyboardInterrupt is not: the wait loop's reads that may fail without failing
    the step (a pod's log, an annotation: `except Exception`) must not swallow it, which a
    Cancelled raised there was (CI saw a step on SIGTERM wait on for good). run() turns it into
    Cancelled once the job is dealt with."""


@contextmanager
def hurry_on_signal(session: JobSession, progress: Progress, enabled: bool) -> Iterator[None]:
    """While a cancelled step stops its job: a second SIGINT / SIGTERM kills the tasks now
    instead of waiting out their grace period, where the backend stops tasks itself (local)."""
    hurry = getattr(session, "hurry", None)
    if hurry is None or not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    progress.note("stopping the job's tasks (SIGTERM, then SIGKILL after their grace period); "
                  "interrupt again to kill them now")

    def handler(signum: int, _frame: object) -> None:
        hurry()
        progress.note(f"{signal.Signals(signum).name} again: killing the job's tasks now")

    with stop_signals_handled_by(handler):
        yield


@contextmanager
def stop_signals(enabled: bool) -> Iterator[None]:
    """Turn SIGTERM (a cancelled pipeline) and SIGINT into StopSignal, which run() answers by
    cleaning up per on_cancel and raising Cancelled; only possible from the main thread."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise StopSignal(f"cancelled by {signal.Signals(signum).name}")

    try:
        with stop_signals_handled_by(handler):
            yield
    except StopSignal as err:  # before the wait (the submission) or during the cleanup: the same Cancelled
        raise Cancelled(str(err)) from None
