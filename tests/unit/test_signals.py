"""The stop signals a step takes over (signals.py): SIGHUP among them (issue 33, item 8), but an
ignored SIGHUP (nohup) stays ignored. Real signals sent to this process."""

from __future__ import annotations

import os
import signal

from volcano_pipelines.signals import stop_signals_handled_by


def test_sighup_reaches_the_handler_and_the_old_handler_comes_back() -> None:
    got: list[int] = []
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with stop_signals_handled_by(lambda signum, _frame: got.append(signum)):
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
        assert got == [signal.SIGHUP, signal.SIGTERM]
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, before)


def test_an_ignored_sighup_stays_ignored() -> None:
    got: list[int] = []
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stop_signals_handled_by(lambda signum, _frame: got.append(signum)):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
        assert got == [] and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
