"""The reap step's loop on an in-memory cluster: the watches' events go into the loop's queue
as the informers would put them, actions are recorded (and answered as Volcano / the
ReplicaSet controller would: the parameter server pods go), the wall clock is injected.
The integration tests run the same loop against the real control plane."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.helpers.reaping import InMemorySweep, Recorder, T0, batch_job, deployment, pod, ps_pod, trained_job, vjob
from volcano_pipelines.errors import InputError
from volcano_pipelines.k8s.errors import Forbidden
from volcano_pipelines.lifecycle import sweep as sweeper
from volcano_pipelines.steps import ReapResult


def run(actions: Recorder, listings: dict[str, list], at: float, **options: Any) -> ReapResult:
    sweep = InMemorySweep(listings, now=T0 + timedelta(seconds=at), **options)
    actions.live["sweep"] = sweep  # type: ignore[attr-defined]
    return sweep.run()


def test_one_job_is_completed_and_the_linger_measured(actions: Recorder) -> None:
    result = run(actions, trained_job(), at=60, job="j")
    assert result.succeeded and result.message == "job ns/j: parameter servers ended"
    assert actions.calls == [("command", "j", "CompleteJob", sweeper.COMMAND_REASON),
                             ("event", "Job", "j", sweeper.EVENT_REAPED)]
    [reaped] = result.reaped
    assert (reaped.action, reaped.ps_pods, reaped.completed_at) == ("completed", ["j-ps-0"], "2026-01-01T12:00:20Z")
    assert reaped.linger_seconds == 40.0 and result.ps_linger_seconds == 40.0


def test_dry_run_acts_on_nothing(actions: Recorder) -> None:
    result = run(actions, trained_job(), at=60, job="j", dry_run=True)
    assert result.succeeded and [r.action for r in result.reaped] == ["would complete"] and actions.calls == []
    waiting = run(actions, trained_job(), at=25, job="j", dry_run=True)  # still in its grace period
    assert waiting.reaped == [] and waiting.waiting[0].action == "grace" and actions.calls == []


def test_a_failed_worker_is_reported_or_aborted(actions: Recorder) -> None:
    listings = {"vjobs": [vjob()], "vpods": [pod("j-worker-0", "worker", "Failed", finished=3), pod("j-ps-0", "ps", "Running")]}
    reported = run(actions, listings, at=60, job="j")
    assert not reported.succeeded and reported.failed[0].action == "reported" and actions.calls == []
    aborted = run(actions, listings, at=60, job="j", on_failure="abort")
    assert not aborted.succeeded and aborted.failed[0].action == "aborted"
    assert actions.calls == [("abort", "j", "WorkersFailed"), ("event", "Job", "j", sweeper.EVENT_ABORTED)]


def test_finished_missing_and_unsuitable_jobs(actions: Recorder) -> None:
    done = run(actions, {"vjobs": [vjob("Completed")], "vpods": []}, at=60, job="j")
    assert done.succeeded and "nothing to reap: the job is Completed" in (done.message or "")
    missing = run(actions, {"vjobs": [], "vpods": []}, at=60, job="j")
    assert not missing.succeeded and missing.message == "job ns/j not found"
    with pytest.raises(InputError) as err:
        run(actions, trained_job(), at=60, job="j", completion_task="chief")
    assert err.value.field == "completion_task" and "ps, worker" in err.value.allowed
    assert actions.calls == []


def test_one_sweep_scales_classic_groups_and_leaves_the_rest(actions: Recorder) -> None:
    listings = {
        "bjobs": [batch_job("a-w0", "Complete", completed=10), batch_job("b-w0", None, group="b")],
        "deploys": [deployment("a-ps"), deployment("b-ps", group="b")],
        "cpods": [ps_pod("a-ps")],
        **trained_job(),
    }
    result = run(actions, listings, at=100, selector="group", group_label="group", once=True)
    assert result.succeeded
    assert sorted((r.kind, r.name, r.action) for r in result.reaped) == [("classic", "group=a", "scaled"),
                                                                         ("volcano", "j", "completed")]
    assert [(w.name, w.action) for w in result.waiting] == [("group=b", "wait")]
    assert ("scale", "a-ps", "0") in actions.calls and not any(c[:2] == ("scale", "b-ps") for c in actions.calls)
    classic = next(r for r in result.reaped if r.kind == "classic")
    assert classic.linger_seconds == 90.0 and classic.ps_pods == ["a-ps-abc"]


def test_a_refused_watch_is_a_cluster_error(actions: Recorder) -> None:
    sweep = InMemorySweep({}, now=T0, job="j")
    sweep._informers()  # creates the caches
    sweep.events.put(("error", "vpods", Forbidden("permission denied to watch pods", status=403)))
    sweep._informers = list  # type: ignore[method-assign]
    with pytest.raises(Forbidden):
        sweep.run()
