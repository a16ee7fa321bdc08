"""pytest plugin: where a run's time goes, per test folder (issue 33: measure before cutting).
Each folder's setup + call + teardown seconds (a session fixture's start-up counts where it is
first used) and its test count, printed at the end of every run after --durations' slowest 25."""

from __future__ import annotations

from collections import Counter

import pytest

_seconds: Counter[str] = Counter()
_tests: Counter[str] = Counter()


def folder_of(nodeid: str) -> str:
    """`tests/unit/cli/test_x.py::test_y` -> `tests/unit`; a module directly in tests/ is its own."""
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    folder = folder_of(report.nodeid)
    _seconds[folder] += report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _tests[folder] += 1


@pytest.hookimpl(trylast=True)  # after --durations' list
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    total = sum(_seconds.values())
    if total <= 0:
        return
    terminalreporter.write_sep("=", "time per test folder (setup + call + teardown)")
    for folder, seconds in _seconds.most_common():
        terminalreporter.write_line(f"{seconds:9.1f}s {100 * seconds / total:5.1f}% {_tests[folder]:6d} tests  {folder}")
    terminalreporter.write_line(f"{total:9.1f}s in all")
