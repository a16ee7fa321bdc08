"""A blocking call waited for from the main thread without deafening it to signals."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

__all__ = ["GaveUp", "answering_signals"]
T = TypeVar("T")


class GaveUp(Exception):
    """`answering_signals` stopped waiting because its `give_up` event was set."""


def answering_signals(fn: Callable[[], T], give_up: threading.Event | None = None) -> T:
    """`fn()` in a daemon thread, waited for here. A call into hdfs-native does not return to
    Python until the NameNode answers, and Python runs signal handlers only between the main
    thread's own bytecodes: called from the main thread, a SIGTERM or Ctrl-C would wait for the
    NameNode (for ever, if it never answers). Waiting on an event lets the handlers run; one that
    raises (KeyboardInterrupt) ends the wait, and the thread is left to the process's exit.
    `give_up` set (checked every 0.1 s) raises GaveUp."""
    box: list[Any] = []
    done = threading.Event()

    def call() -> None:
        try:
            box.append((True, fn()))
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
            box.append((False, err))
        finally:
            done.set()

    threading.Thread(target=call, name="source-call", daemon=True).start()
    while not done.wait(None if give_up is None else 0.1):
        if give_up is not None and give_up.is_set():
            raise GaveUp()
    ok, value = box[0]
    if not ok:
        raise value
    return cast(T, value)
