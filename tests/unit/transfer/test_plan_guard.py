"""Pure parts of the sync hardening: the --delete guard, names that are not UTF-8, the
plan's counts, the progress lines off a terminal, and the parameter -> flag mapping."""

from __future__ import annotations

import io

import pytest

from volcano_pipelines.cli import build_parser
from volcano_pipelines.cli.sync import FLAGS, _Printer
from volcano_pipelines.steps._sync import sync
from volcano_pipelines.transfer.plan import (
    DeleteLimit,
    Entry,
    build_plan,
    check_deletions,
    display_path,
    full_unsafe_reason,
    parse_max_delete,
    quoted_path,
    unsafe_reason,
    utf8_path,
)


def E(path: str, size: int = 10, mtime: int = 1_000) -> Entry:
    return Entry(path, size, mtime)


# ---------------------------------------------------------------------------- 1. --delete guard


@pytest.mark.parametrize(
    "text,want",
    [
        ("50%", DeleteLimit(percent=50.0)),
        ("100%", DeleteLimit(percent=100.0)),
        ("0%", DeleteLimit(percent=0.0)),
        ("12.5%", DeleteLimit(percent=12.5)),
        ("0", DeleteLimit(count=0)),
        ("250", DeleteLimit(count=250)),
        (" 7 ", DeleteLimit(count=7)),
        ("101%", None),
        ("-1", None),
        ("-5%", None),
        ("nan%", None),
        ("inf%", None),
        ("%", None),
        ("", None),
        ("ten", None),
        ("1.5", None),
    ],
)
def test_parse_max_delete(text: str, want: DeleteLimit | None) -> None:
    assert parse_max_delete(text) == want


def _dest(n: int) -> list[Entry]:
    return [E(f"f{i}") for i in range(n)]


def test_an_empty_source_never_deletes_whatever_the_limit() -> None:
    plan = build_plan([], _dest(6), delete=True)
    refusal = check_deletions(plan, 6, DeleteLimit(percent=100.0))
    assert refusal is not None and refusal.empty_source and refusal.deletes == 6
    # Filters that select nothing look the same: nothing of the source is left to keep.
    plan = build_plan([E("f0.txt")], [E(f"f{i}.csv") for i in range(6)], delete=True, include=["*.csv"])
    refusal = check_deletions(plan, 6, DeleteLimit(count=1000))
    assert refusal is not None and refusal.empty_source and refusal.deletes == 6


def test_the_share_and_count_limits() -> None:
    plan = build_plan(_dest(3), _dest(6), delete=True)  # deletes f3, f4, f5: 3 of 6
    assert check_deletions(plan, 6, DeleteLimit(percent=50.0)) is None
    refusal = check_deletions(plan, 6, DeleteLimit(percent=49.0))
    assert refusal is not None and (refusal.deletes, refusal.dest_files, refusal.empty_source) == (3, 6, False)
    assert check_deletions(plan, 6, DeleteLimit(count=3)) is None
    assert check_deletions(plan, 6, DeleteLimit(count=2)) is not None


def test_a_file_in_the_way_of_a_directory_is_not_a_delete_deletion() -> None:
    # Replacing a file by a directory of the same name happens without --delete too.
    plan = build_plan([E("a/b")], [E("a")])
    assert check_deletions(plan, 1, DeleteLimit(count=0)) is None


def test_nothing_to_delete_is_never_refused() -> None:
    assert check_deletions(build_plan([], [], delete=True), 0, DeleteLimit(count=0)) is None


# ---------------------------------------------------------------------------- 5. names


def test_a_name_that_is_not_utf8_is_rejected_and_shown_escaped() -> None:
    name = b"d/bad\xff.bin".decode("utf-8", "surrogateescape")  # as os.scandir hands it over
    assert unsafe_reason(name) == full_unsafe_reason(name) == "name is not valid UTF-8"
    assert display_path(name) == utf8_path(name) == "d/bad\\xff.bin"
    assert quoted_path(name) == "b'd/bad\\xff.bin'" and quoted_path("evil\nname") == "'evil\\nname'"
    assert display_path(name).encode("utf-8")  # printable, JSON-safe
    assert display_path("esc\x1b[31m") == "esc\\x1b[31m"
    assert utf8_path("esc\x1b[31m\n") == "esc\x1b[31m\n"  # JSON escapes those itself
    assert display_path("plain/é ü.txt") == "plain/é ü.txt"
    plan = build_plan([E(name), E("ok")], [])
    assert {i.path: i.action.value for i in plan.items} == {name: "reject", "ok": "copy"}


def test_the_plan_counts_every_listed_source_entry() -> None:
    source = [E("a.csv"), E("b.csv"), E("c.log"), E("bad\udcff")]
    plan = build_plan(source, [E("a.csv")], include=["*.csv", "bad*"], rejected=[("link", "symbolic link"), ("x.csv", "fifo")])
    counts = plan.counts()
    assert (counts["copy"], counts["skip"], counts["reject"], plan.excluded) == (1, 1, 2, 2)
    assert counts["copy"] + counts["skip"] + counts["reject"] + plan.excluded == len(source) + 2


# ---------------------------------------------------------------------------- 7. flags


def test_every_step_parameter_has_its_flag_and_every_flag_exists() -> None:
    from volcano_pipelines.cli.flags import flag_for
    from volcano_pipelines.interface.params import params as front_end_params

    params = {p.name for p in front_end_params(sync)}  # the connection group spread into its fields
    assert set(FLAGS) < params
    parser = build_parser("sync")
    sub = next(a for a in parser._actions if a.dest == "command").choices["sync"]  # type: ignore[union-attr]
    options = {opt for action in sub._actions for opt in action.option_strings}
    positional = {action.dest.upper() for action in sub._actions if not action.option_strings}
    for flag in FLAGS.values():
        assert flag in options or flag in positional, flag
    # The copy pods' inputs have flags made from the signature (cli/flags.py).
    for name in params - set(FLAGS):
        assert flag_for(sync, name, ()) in options, name


# ---------------------------------------------------------------------------- progress off a terminal


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_lines_off_a_terminal_show_files_and_bytes_done() -> None:
    stream = io.StringIO()  # not a tty
    clock = _Clock()
    printer = _Printer(stream, quiet=False, interval=10.0, clock=clock)
    printer.files_total, printer.bytes_total = 2, 2_000_000  # as start() sets them, without the ticker thread

    def first() -> None:
        printer.advance("a", 1_000_000)
        printer.file_done("a", "copied")
        clock.now += 10

    def second() -> None:
        printer.advance("b", 1_000_000)
        printer.file_done("b", "copied")
        clock.now += 10

    steps = iter([first, second])

    def wait(seconds: float) -> bool:  # the ticker's wait: one step of progress per interval, then the end
        assert seconds == 10.0
        step = next(steps, None)
        if step is None:
            return True
        step()
        return False

    printer.log_lines(wait)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert "sync: 50.0% files 1/2 1.0/2.0 MB 0.1 MB/s, 10s elapsed" in lines[0]
    assert "sync: 100.0% files 2/2 2.0/2.0 MB 0.1 MB/s, 20s elapsed" in lines[1]


def test_progress_off_a_terminal_logs_nothing_per_chunk_and_a_last_line_at_the_end() -> None:
    stream = io.StringIO()
    clock = _Clock()
    printer = _Printer(stream, quiet=False, interval=3600.0, clock=clock)
    printer.start(1, 4_000_000)
    printer.advance("a", 4_000_000)
    printer.file_done("a", "copied")
    clock.now += 2
    assert stream.getvalue() == ""  # no "0.0%" line at the start, no line per chunk
    printer.finish()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("sync: 100.0% files 1/1 4.0/4.0 MB 2.0 MB/s, 2s elapsed")
    quiet = io.StringIO()
    silent = _Printer(quiet, quiet=True, interval=3600.0)
    silent.start(1, 10)
    silent.finish()
    assert quiet.getvalue() == ""
