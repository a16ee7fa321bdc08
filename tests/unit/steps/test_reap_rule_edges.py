"""The reap rule's edges the other reap tests leave open (scripts/mutation survivors on
lifecycle/reap.py): pods that name no owner, a failed pod of no known task, what a DONE decision
and every non-acting decision say, how many lingering names a reason lists, the expiring
Deployment's unit, grouping past a namespace with only Deployments, and UTC on a machine that
is not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from tests.helpers.reaping import T0, batch_job, decide, deployment, pod, ps_pod, stamp, trained, vjob
from volcano_pipelines.lifecycle import reap as rule


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_pods_that_name_no_owner_count_as_the_jobs() -> None:
    """Pods listed by the job's labels without ownerReferences (as some Volcano versions and
    restored objects have them) are the job's; only another uid makes them an earlier job's."""
    pods = trained()
    for p in pods:
        del p["metadata"]["ownerReferences"]
    d = decide(vjob(), pods, at=100)
    assert d.action == rule.REAP and d.lingering == ("j-ps-0",)


def test_a_failed_pod_of_no_known_task_falls_back_to_the_jobs_policy() -> None:
    job = vjob(policies=[{"event": "PodFailed", "action": "RestartJob"}])
    stray = pod("j-x-0", "x", "Failed")
    del stray["metadata"]["labels"]["volcano.sh/task-spec"]
    d = decide(job, trained() + [stray], at=100)
    assert d.action == rule.WAIT and "j-x-0" in d.reason and "RestartJob" in d.reason


def test_done_says_when_the_completion_task_finished() -> None:
    d = decide(vjob(), trained(ps_phase="Succeeded"), at=100)
    assert d.action == rule.DONE and d.completed_at == at(20)
    assert d.reason == "the worker task finished and nothing else runs"


def test_every_decision_that_does_not_act_says_why() -> None:
    no_task = decide(vjob(tasks={"ps": 1, "launcher": 1}), [], at=0)
    assert no_task.action == rule.SKIP
    assert no_task.reason == "no completion task (chief, mpimaster, worker) among the job's tasks (ps, launcher)"
    named = decide(vjob(), [], at=0, completion_task="driver")
    assert named.reason == "no completion task (driver) among the job's tasks (ps, worker)"
    pending = decide(vjob("Pending"), [], at=0)
    assert (pending.action, pending.reason) == (rule.WAIT, "the job is Pending")
    assert rule.decide_classic([], [], [], now=T0, grace=0).reason == "no batch/v1 Jobs (workers) in the group"
    waiting = rule.decide_classic([batch_job("w0", "Complete"), batch_job("w1", None)], [], [], now=T0, grace=0)
    assert waiting.reason == "1/2 worker Job(s) complete"
    failed = rule.decide_classic([batch_job("w1", "Failed")], [], [], now=T0, grace=0)
    assert failed.reason.startswith("worker Job(s) failed: w1; ")


@pytest.mark.parametrize("servers, listed, more", [(5, 5, ""), (6, 5, " and 1 more")])
def test_a_reason_lists_five_lingering_pods_then_counts(servers: int, listed: int, more: str) -> None:
    job = vjob(tasks={"ps": servers, "worker": 1})
    pods = [pod("j-worker-0", "worker", "Succeeded", finished=0)] + [pod(f"j-ps-{i}", "ps", "Running") for i in range(servers)]
    d = decide(job, pods, at=100)
    names = ", ".join(f"j-ps-{i}" for i in range(listed))
    assert d.reason.endswith(f"and {names}{more} still run") and len(d.lingering) == servers


def test_the_expiring_deployments_unit_carries_it() -> None:
    expiring = deployment("tb", annotations={rule.EXPIRES_ANNOTATION: stamp(60)})
    [unit] = rule.group_units([], [], [expiring], [])
    assert unit.key == ("expiry", "ns", "tb") and unit.obj == expiring
    assert rule.decide(unit, now=at(61), grace=0).action == rule.REAP


def test_a_namespace_with_only_deployments_does_not_hide_the_next_group() -> None:
    lonely = deployment("cache", group=None)
    lonely["metadata"]["namespace"] = "a"
    job, server, server_pod = batch_job("w0", "Complete"), deployment("ps", group=None), ps_pod("ps")
    for obj in (job, server, server_pod):
        obj["metadata"]["namespace"] = "b"
    units = rule.group_units([], [job], [lonely, server], [server_pod])
    assert [u.key for u in units] == [("classic", "b", "")]


@pytest.fixture
def india_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "IST-5:30")  # a POSIX zone string: needs no time zone database
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_times_are_written_in_utc_whatever_the_machines_zone(india_local_time: None) -> None:
    assert rule.format_time(datetime(2026, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))) == "2026-01-01T12:00:00Z"
