"""The hung-task protocol's pure half (volcano/stalls.py): the coordinator's `vpipe:stalled`
lines read back, index ranges both ways, garbage ignored; and the examples' heartbeat.py (the
writer and the coordinator's scan) against real files."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path
from types import ModuleType

from volcano_pipelines.volcano.stalls import Stall, format_task_ranges, merge_ranges, parse_ranges, parse_stalled

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def heartbeat_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("heartbeat", EXAMPLES / "tf-ps" / "heartbeat.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_latest_stalled_line_is_read_with_its_names_and_figures() -> None:
    text = "\n".join([
        "[12:00:01] step 200",
        "vpipe:stalled count=1 tasks=worker[3] silent=worker[3] oldest=21 oldest_task=worker[3] time=1700000000",
        "vpipe:progress step=250 total=1000",
        "I1205 prefix vpipe:stalled count=2 tasks=chief[0],worker[1] silent=worker[1] oldest=31 "
        "oldest_task=worker[1] time=1700000010",
    ])
    report = parse_stalled(text)
    assert report is not None
    assert (report.count, report.tasks, report.silent) == (2, "chief[0],worker[1]", "worker[1]")
    assert (report.oldest_seconds, report.oldest_task, report.time) == (31.0, "worker[1]", 1700000010.0)


def test_a_cleared_line_means_no_task_is_stalled_and_garbage_is_ignored() -> None:
    cleared = parse_stalled("vpipe:stalled count=1 tasks=worker[3] time=5\nvpipe:stalled count=0 tasks=none time=9")
    assert cleared is not None and cleared.count == 0 and cleared.tasks == ""
    for junk in ("vpipe:stalled", "vpipe:stalled count=x tasks=worker[1]", "vpipe:stalled count=3 tasks=",
                 "vpipe:stalledcount=1 tasks=w[1]", "vpipe:stalled count=1 tasks=[]]", "x" * 5000 + " vpipe:stalled count=1 tasks=w[1]",
                 None, ""):
        assert parse_stalled(junk) is None, junk


def test_index_ranges_both_ways_and_past_the_cap_a_count() -> None:
    tasks, more = parse_ranges("chief[0],worker[12-15,803],+7")
    assert tasks == {"chief": {0}, "worker": {12, 13, 14, 15, 803}} and more == 7
    assert format_task_ranges(tasks, more) == "chief[0],worker[12-15,803],+7"
    assert merge_ranges("worker[1-2]", "chief[0]", "worker[3]") == "chief[0],worker[1-3]"
    # 10,000 workers, every other one stalled: 40 ranges shown, the other 4,960 counted.
    many = format_task_ranges({"worker": set(range(0, 10_000, 2))})
    assert many.startswith("worker[0,2,4,") and many.endswith(",+4960") and len(many) < 300


def test_a_stall_says_which_tasks_stopped_beating_and_which_only_stopped_progressing() -> None:
    stall = Stall("chief[0],worker[1]", "worker[1]", 31.4, 1700000000, "warn")
    assert stall.describe() == "worker[1] (no heartbeat), chief[0] (no progress) for 31s"
    assert stall.to_dict() == {"tasks": "chief[0],worker[1]", "silent": "worker[1]", "oldest_seconds": 31,
                               "since": "2023-11-14T22:13:20Z", "action": "warn"}


def test_the_example_copies_of_heartbeat_py_are_the_same_file() -> None:
    assert (EXAMPLES / "tf-ps" / "heartbeat.py").read_bytes() == (EXAMPLES / "mpi" / "heartbeat.py").read_bytes()


def test_the_scan_names_silent_and_idle_tasks_never_a_slow_start_or_a_finished_one(tmp_path: Path,
                                                                                    monkeypatch: object) -> None:
    hb = heartbeat_module()
    directory = tmp_path / "progress"
    directory.mkdir()
    now = time.time()
    since = now - 100
    files = {
        "chief-0": f"step=300 progress={now - 1} beat={now - 1} state=running",      # fine
        "worker-1": f"step=- progress=- beat={now - 40} state=running",               # silent 40 s
        "worker-2": f"step=250 progress={now - 35} beat={now - 2} state=running",    # beats, no progress 35 s
        "ps-0": f"step=- progress=- beat={now - 2} state=running",                    # a PS: no steps, alive
        "worker-3": f"step=- progress=- beat={since - 50} state=running",             # an older attempt's file
        "worker-4": f"step=90 progress={now - 90} beat={now - 90} state=done",        # ended normally
        "worker-5": "garbage",
        "chief-0x": "ignored: not <task>-<index>",
        "worker-7": f"step=3000 progress={now - 60} beat={now - 1} state=trained",   # past its last step: exporting
    }
    for name, text in files.items():
        (directory / name).write_text(text + "\n")
    (directory / ".worker-6.123.tmp").write_text(f"beat={now - 500}")
    stalled = hb.scan(str(directory), now, since, 30.0)
    assert sorted((t, i, silent) for t, i, _, silent in stalled) == [("worker", 1, True), ("worker", 2, False)]
    line = hb.stalled_line(stalled, now)
    report = parse_stalled(line)
    assert report is not None and report.tasks == "worker[1-2]" and report.silent == "worker[1]"
    assert report.oldest_task == "worker[1]" and report.oldest_seconds == 40


def test_the_writer_beats_atomically_and_keeps_the_step_it_reported(tmp_path: Path) -> None:
    hb = heartbeat_module()
    os.environ.pop("VPIPE_JOB_NAME", None)
    beat = hb.Heartbeat(str(tmp_path), "worker", 7, timeout=10.0)
    assert beat.interval == 1.0
    os.makedirs(beat.directory)  # start() without its thread
    beat.progress(1234)
    beat.write()
    path = tmp_path / ".vpipe" / "progress" / "job" / "worker-7"
    fields = hb.parse(path.read_text())
    assert fields["step"] == "1234" and fields["state"] == "running" and float(fields["beat"]) > 0
    assert [p.name for p in path.parent.iterdir()] == ["worker-7"]  # no temporary file left
    # The scanner prints a line when the set changes (not while it stays the same for a minute).
    lines: list[str] = []
    scanner = hb.Scanner(str(path.parent), 10.0, out=lines.append)
    scanner.report([])
    scanner.report([("worker", 1, 12.0, True)])
    scanner.report([("worker", 1, 13.0, True)])
    scanner.report([])
    assert [parse_stalled(line).count for line in lines] == [1, 0]  # type: ignore[union-attr]


def test_the_coordinator_counts_as_beating_while_its_process_runs(tmp_path: Path) -> None:
    """TensorFlow may hold Python's lock in the coordinator while it waits for a stopped task:
    its beat is late, but its process runs; only its progress counts then."""
    import subprocess
    import signal

    hb = heartbeat_module()
    now = time.time()
    (tmp_path / "chief-0").write_text(f"step=10 progress={now - 5} beat={now - 60} state=running\n")
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert hb.process_running(child.pid) is True
        assert hb.scan(str(tmp_path), now, now - 100, 30.0, {"chief-0": child.pid}) == []
        child.send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        assert hb.process_running(child.pid) is False
        assert [s[3] for s in hb.scan(str(tmp_path), now, now - 100, 30.0, {"chief-0": child.pid})] == [True]
    finally:
        child.kill()
        child.wait()
    assert hb.process_running(child.pid) is False
