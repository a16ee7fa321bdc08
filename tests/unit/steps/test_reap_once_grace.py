"""`vpipe reap --once` (a CronJob's sweep) with a job still inside its grace period: the sweep
waits for it to come due and reaps it, instead of exiting with it "not due". Every other
test of the loop starts outside the grace period (and every integration run uses --grace 0),
so only this one sees the wait. The wall clock here moves with real time (the loop's own
timers wake it): a grace period of 1.5 s, coming due 0.3 s into the sweep."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from tests.helpers.reaping import InMemorySweep, Recorder, T0, trained_job
from volcano_pipelines.lifecycle import sweep as sweeper


def moving_wall(start: datetime):  # type: ignore[no-untyped-def]
    began = time.monotonic()
    return lambda: start + timedelta(seconds=time.monotonic() - began)


def test_once_waits_for_a_job_in_its_grace_period_and_reaps_it(actions: Recorder) -> None:
    # The workers finished at T0+20 (the completion task); the sweep starts at T0+21.2 with a
    # grace period of 1.5 s: the job comes due 0.3 s into the sweep (a real wait: keep it short).
    sweep = InMemorySweep(trained_job(), now=T0, grace=1.5, once=True)
    sweep.wall = moving_wall(T0 + timedelta(seconds=21.2))
    sweep.started_wall = sweep.wall()
    actions.live["sweep"] = sweep  # type: ignore[attr-defined]
    result = sweep.run()
    assert result.succeeded, result.message
    assert [(r.name, r.action) for r in result.reaped] == [("j", "completed")] and result.waiting == []
    assert actions.calls[0] == ("command", "j", "CompleteJob", sweeper.COMMAND_REASON)
    assert result.reaped[0].linger_seconds is not None and result.reaped[0].linger_seconds >= 1.5


def test_once_leaves_a_job_due_after_its_grace_horizon_waiting(actions: Recorder) -> None:
    """What it does not wait for: a job still training (no completion task finished yet)."""
    listings = trained_job()
    listings["vpods"] = [p for p in listings["vpods"] if p["metadata"]["name"] != "j-worker-1"]
    listings["vpods"].append({**listings["vpods"][0], "metadata": {**listings["vpods"][0]["metadata"], "name": "j-worker-1",
                                                                     "uid": "uid-j-worker-1"},
                              "status": {"phase": "Running"}})
    sweep = InMemorySweep(listings, now=T0, grace=1.5, once=True)
    sweep.wall = moving_wall(T0 + timedelta(seconds=20.5))
    sweep.started_wall = sweep.wall()
    actions.live["sweep"] = sweep  # type: ignore[attr-defined]
    result = sweep.run()
    assert result.succeeded and result.reaped == [] and actions.calls == []
    assert [(w.name, w.action) for w in result.waiting] == [("j", "wait")]
