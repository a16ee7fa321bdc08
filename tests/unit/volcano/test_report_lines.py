"""The progress protocol's parser and what the step makes of the reports over time (pure)."""

from __future__ import annotations

import json

import pytest

from volcano_pipelines.volcano.report_lines import (
    CHECKPOINT_ANNOTATION,
    PROGRESS_ANNOTATION,
    ProgressTracker,
    Report,
    TrainingProgress,
    annotations_patch,
    parse_line,
    parse_text,
    progress_from_annotations,
    reporting_pod,
)
from volcano_pipelines.volcano.summary import format_eta, format_training


def test_a_progress_line_with_every_field() -> None:
    report = parse_line("vpipe:progress step=1200 total=6000 loss=0.431 examples_per_second=812.5 time=1700000000.5")
    assert report == Report("progress", 1200, total=6000, loss=0.431, examples_per_second=812.5, time=1700000000.5)


def test_the_marker_may_follow_a_loggers_prefix_and_unknown_keys_are_ignored() -> None:
    report = parse_line("[12:00:01] INFO chief: vpipe:checkpoint step=100 path=/logs/run/ckpt-100 shard=3 extra")
    assert report == Report("checkpoint", 100, path="/logs/run/ckpt-100")


def test_a_quoted_value_may_hold_spaces() -> None:
    report = parse_line('vpipe:resumed step=700 path="/logs/my run/ckpt-7"')
    assert report is not None and report.kind == "resumed" and report.path == "/logs/my run/ckpt-7"


@pytest.mark.parametrize("line", [
    "",
    "step 1200: batch loss 0.43",
    "vpipe:progress",  # no step
    "vpipe:progress step=",  # empty step
    "vpipe:progress step=-3",  # negative
    "vpipe:progress step=12.5",  # not an integer
    "vpipe:progress step=1e3",
    "vpipe:progress step=" + "9" * 40,  # absurd
    "vpipe:progressive step=3",  # another word
    "vpipe:unknown step=3",
    "vpipe:progress step=3 " + "x" * 5000,  # too long to be ours
    "\x00\xff vpipe: progress step=1",
])
def test_garbage_is_no_report(line: str) -> None:
    assert parse_line(line) is None


def test_a_bad_optional_value_is_dropped_not_the_report() -> None:
    report = parse_line("vpipe:progress step=5 total=abc loss=nan examples_per_second=-1 time=yesterday")
    assert report == Report("progress", 5)


def test_parse_text_keeps_order_and_skips_the_rest() -> None:
    text = "\n".join(["starting", "vpipe:progress step=1 total=10", "Traceback (most recent call last):",
                      "vpipe:checkpoint step=1", "vpipe:progress step=2 total=10", "vpipe:progr"])
    assert [(r.kind, r.step) for r in parse_text(text)] == [("progress", 1), ("checkpoint", 1), ("progress", 2)]
    assert parse_text(None) == [] and parse_text("") == []


def test_rate_and_eta_come_from_the_reports_over_time() -> None:
    tracker = ProgressTracker()
    assert tracker.observe(parse_text("vpipe:progress step=100 total=1100 loss=0.6"), now=1000.0)
    assert tracker.state.eta_seconds is None  # one point: no rate yet
    tail = "vpipe:progress step=100 total=1100 loss=0.6\nvpipe:progress step=300 total=1100 loss=0.5"
    assert tracker.observe(parse_text(tail), now=1010.0)
    state = tracker.state
    assert state.step == 300 and state.loss == 0.5 and state.steps_per_second == pytest.approx(20.0)
    assert state.eta_seconds == pytest.approx(40.0)


def test_the_same_tail_read_again_changes_nothing() -> None:
    tracker = ProgressTracker()
    tail = parse_text("vpipe:progress step=100 total=1000\nvpipe:checkpoint step=100 path=/c/100")
    assert tracker.observe(tail, now=1000.0)
    before = tracker.state
    assert not tracker.observe(tail, now=1030.0)
    assert tracker.state == before and before.checkpoint_time == 1000.0  # first seen, not last


def test_the_lines_own_time_wins_over_when_it_was_read() -> None:
    tracker = ProgressTracker()
    tracker.observe(parse_text("vpipe:progress step=0 total=100 time=500\nvpipe:progress step=50 total=100 time=510"),
                    now=9999.0)
    assert tracker.state.steps_per_second == pytest.approx(5.0) and tracker.state.eta_seconds == pytest.approx(10.0)


def test_a_restart_resumed_from_a_checkpoint() -> None:
    tracker = ProgressTracker()
    tracker.observe(parse_text("vpipe:progress step=300 total=1000\nvpipe:checkpoint step=300 path=/c/300"), 100.0)
    tracker.restarted()
    tracker.observe(parse_text("vpipe:resumed step=300 path=/c/300\nvpipe:progress step=350 total=1000"), 200.0)
    assert tracker.state.resumed_from_step == 300 and tracker.state.step == 350
    assert tracker.state.steps_per_second is None  # the rate starts again with the new attempt


def test_a_resumed_run_stands_at_its_checkpoint_not_at_the_old_attempts_last_step() -> None:
    # Seen on CI: the parameter server killed at the checkpoint of step 500; the chief printed
    # step 600 before it failed; the new attempt resumed from 500. Until its first progress
    # report the step shown must be 500, so steps only go forward from the resume on.
    tracker = ProgressTracker()
    tracker.observe(parse_text("vpipe:checkpoint step=500 path=/c/500\nvpipe:progress step=600 total=1000"), 100.0)
    tracker.restarted()
    assert tracker.observe(parse_text("vpipe:resumed step=500 path=/c/500"), 200.0)
    assert (tracker.state.step, tracker.state.resumed_from_step, tracker.state.eta_seconds) == (500, 500, None)
    tail = "vpipe:resumed step=500 path=/c/500\nvpipe:progress step=550 total=1000"
    tracker.observe(parse_text(tail), 210.0)
    assert tracker.state.step == 550
    tracker.observe(parse_text(tail), 220.0)  # the same resume line read again moves nothing back
    assert tracker.state.step == 550 and tracker.state.resumed_from_step == 500


def test_a_second_resume_from_the_same_step_with_its_own_time_is_taken() -> None:
    tracker = ProgressTracker()
    tracker.observe(parse_text("vpipe:resumed step=500 time=100\nvpipe:progress step=700 total=1000"), 1.0)
    tracker.restarted()
    tracker.observe(parse_text("vpipe:resumed step=500 time=200"), 2.0)
    assert tracker.state.step == 500


def test_a_restart_without_a_resumed_line_does_not_guess() -> None:
    tracker = ProgressTracker()
    tracker.observe(parse_text("vpipe:progress step=300 total=1000"), 100.0)
    tracker.restarted()
    tracker.observe(parse_text("vpipe:progress step=50 total=1000"), 200.0)
    assert tracker.state.resumed_from_step is None and tracker.state.step == 50


def test_resumed_from_step_zero_is_a_fresh_start() -> None:
    tracker = ProgressTracker()
    tracker.observe(parse_text("vpipe:resumed step=0"), 1.0)
    assert tracker.state.resumed_from_step is None


def test_a_step_going_back_restarts_the_rate_and_keeps_no_negative_eta() -> None:
    tracker = ProgressTracker()
    tracker.observe(parse_text("vpipe:progress step=500 total=400 time=10\nvpipe:progress step=600 total=400 time=20"), 0)
    assert tracker.state.eta_seconds == 0.0  # past the total: ETA 0, never negative
    tracker.observe(parse_text("vpipe:progress step=100 total=400 time=30"), 0)
    assert tracker.state.step == 100 and tracker.state.eta_seconds is None


def test_annotations_hold_compact_json_and_only_what_is_known() -> None:
    assert annotations_patch(TrainingProgress()) == {}
    state = TrainingProgress(step=1200, total=6000, loss=0.431, examples_per_second=812.5, steps_per_second=25.0,
                             eta_seconds=192.4, updated=1700000000.0, checkpoint_step=1200,
                             checkpoint_path="/logs/c/1200", checkpoint_time=1700000000.0, resumed_from_step=700)
    patch = annotations_patch(state)
    assert json.loads(patch[PROGRESS_ANNOTATION]) == {
        "step": 1200, "total": 6000, "loss": 0.431, "examples_per_second": 812.5, "steps_per_second": 25.0,
        "eta_seconds": 192.0, "updated": "2023-11-14T22:13:20Z", "resumed_from_step": 700}
    assert json.loads(patch[CHECKPOINT_ANNOTATION]) == {"step": 1200, "time": "2023-11-14T22:13:20Z",
                                                        "path": "/logs/c/1200"}
    assert " " not in patch[PROGRESS_ANNOTATION]
    back = progress_from_annotations(patch)
    assert (back.step, back.total, back.checkpoint_step, back.resumed_from_step) == (1200, 6000, 1200, 700)
    assert back.checkpoint_time == 1700000000.0


@pytest.mark.parametrize("annotations", [None, {}, {PROGRESS_ANNOTATION: "not json"},
                                         {PROGRESS_ANNOTATION: "[1, 2]", CHECKPOINT_ANNOTATION: "null"},
                                         {PROGRESS_ANNOTATION: '{"step": "many", "total": true}'}])
def test_unreadable_annotations_read_as_nothing_reported(annotations: dict[str, str] | None) -> None:
    assert not progress_from_annotations(annotations).reported


def test_the_line_users_read() -> None:
    state = TrainingProgress(step=1200, total=6000, loss=0.431, examples_per_second=812.5, eta_seconds=192,
                             checkpoint_step=1200, resumed_from_step=700)
    assert format_training("mnist", state) == ("job mnist: step 1200/6000 (20.0%), 812.5 examples/s, loss 0.431, "
                                               "ETA 3m12s, checkpoint at step 1200, resumed from step 700")
    assert format_training("mnist", TrainingProgress()) == "job mnist: no progress reported"
    assert [format_eta(s) for s in (None, 5, 65, 7300)] == [None, "5s", "1m05s", "2h01m"]


@pytest.mark.parametrize(("tasks", "pod"), [
    (["ps", "worker", "chief"], "j-chief-0"),
    (["ps", "worker"], "j-worker-0"),
    (["mpimaster", "mpiworker"], "j-mpimaster-0"),
    (["ps"], None),
])
def test_the_reporting_pod(tasks: list[str], pod: str | None) -> None:
    job = {"metadata": {"name": "j"}, "spec": {"tasks": [{"name": t} for t in tasks]}}
    assert reporting_pod(job) == pod


# ---------------------------------------------------------------- issue 42 item 4: the ETA


def _lines(steps: range, total: int, *, at: float | None = None) -> str:
    """The progress lines of a run at 100 steps/s, with their printed times when `at` is given
    (the time of step 0)."""
    return "\n".join(f"vpipe:progress step={s} total={total}" + (f" time={at + s / 100}" if at is not None else "")
                     for s in steps)


def test_lines_without_time_read_in_a_batch_do_not_make_a_burst_of_steps() -> None:
    # 100 steps/s, a line every 50 steps, no time on the lines, a read every 15 s: the first
    # read holds 1.5 s... 15 s of lines at once. Taking the read's time for all of them made the
    # rate (3000 - 50) / 15 s = 197 steps/s and the ETA half the truth (issue 42: `ETA 38s`
    # where 53 s remained).
    tracker = ProgressTracker()
    tracker.observe(parse_text(_lines(range(50, 1501, 50), 6000)), now=15.0)
    tracker.observe(parse_text(_lines(range(50, 3001, 50)[-200:], 6000)), now=30.0)
    assert tracker.state.step == 3000
    assert tracker.state.steps_per_second == pytest.approx(100.0)
    assert tracker.state.eta_seconds == pytest.approx(30.0)


def test_the_rate_comes_from_the_printed_times_over_the_last_minute() -> None:
    # Read long after they were printed, and the pace halved after a fast first minute: the
    # ETA follows the current pace, not the average since the start.
    tracker = ProgressTracker()
    fast = "\n".join(f"vpipe:progress step={s} total=20000 time={1000 + s / 200}" for s in range(0, 12001, 500))
    tracker.observe(parse_text(fast), now=5000.0)
    assert tracker.state.steps_per_second == pytest.approx(200.0)
    slow = "\n".join(f"vpipe:progress step={s} total=20000 time={1060 + (s - 12000) / 100}"
                     for s in range(12000, 19001, 500))
    tracker.observe(parse_text(slow), now=5001.0)
    assert tracker.state.step == 19000
    assert tracker.state.steps_per_second == pytest.approx(100.0)
    assert tracker.state.eta_seconds == pytest.approx(10.0)


def test_after_a_resume_the_rate_is_the_new_attempts_own() -> None:
    tracker = ProgressTracker()
    tracker.observe(parse_text(_lines(range(0, 3501, 50), 6000, at=0.0)), now=40.0)
    tracker.restarted()
    # The new attempt prints its resume line and starts 20 s later (TensorFlow's start-up),
    # then goes at 100 steps/s again; all of it read at once.
    tail = ("vpipe:resumed step=3000 time=100\n"
            + "\n".join(f"vpipe:progress step={s} total=6000 time={120 + (s - 3000) / 100}" for s in range(3050, 3451, 50)))
    tracker.observe(parse_text(tail), now=125.0)
    assert tracker.state.step == 3450 and tracker.state.resumed_from_step == 3000
    assert tracker.state.steps_per_second == pytest.approx(100.0)
    assert tracker.state.eta_seconds == pytest.approx(25.5)


def test_a_resume_line_printed_identically_by_two_attempts_is_taken_each_time() -> None:
    # Same step, no time: the second attempt's line looks like the first attempt's. Before,
    # it was ignored and the display kept the dead attempt's step 3600 and its ETA.
    tracker = ProgressTracker()
    first = "vpipe:resumed step=3000\n" + _lines(range(3050, 3601, 50), 6000)
    tracker.observe(parse_text(first), now=100.0)
    assert tracker.state.step == 3600
    tracker.restarted()
    # The old attempt's log read once more while it restarts: nothing moves back.
    assert not tracker.observe(parse_text(first), now=110.0)
    assert tracker.state.step == 3600
    # The new attempt's first lines.
    assert tracker.observe(parse_text("vpipe:resumed step=3000"), now=130.0)
    assert (tracker.state.step, tracker.state.resumed_from_step, tracker.state.eta_seconds) == (3000, 3000, None)
    # Read again: still nothing moves back.
    tracker.observe(parse_text("vpipe:resumed step=3000\nvpipe:progress step=3050 total=6000"), now=140.0)
    tracker.observe(parse_text("vpipe:resumed step=3000\nvpipe:progress step=3050 total=6000"), now=150.0)
    assert tracker.state.step == 3050
