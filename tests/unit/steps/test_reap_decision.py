"""The reap rule on dicts: every branch of the decision for Volcano Jobs, classic groups and
expiring Deployments, and the grouping of what a sweep's watches hold."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.helpers.reaping import T0, batch_job, decide, deployment, pod, ps_pod, stamp, trained, vjob
from volcano_pipelines.errors import InputError
from volcano_pipelines.lifecycle import reap as rule
from volcano_pipelines.steps._reap import check_selector


# ----- Volcano Jobs ---------------------------------------------------------------------------

def test_workers_done_and_ps_running_past_grace_is_reaped_naming_what_lingers() -> None:
    d = decide(vjob(), trained(), at=60)
    assert d.action == rule.REAP
    assert d.completed_at == T0 + timedelta(seconds=20)  # the LAST completion pod's finish
    assert d.lingering == ("j-ps-0",)
    assert "worker task" in d.reason and "j-ps-0" in d.reason and "40s ago" in d.reason


def test_within_grace_waits_until_a_known_time() -> None:
    d = decide(vjob(), trained(), at=25, grace=30)
    assert d.action == rule.GRACE and d.due_at == T0 + timedelta(seconds=50)
    assert decide(vjob(), trained(), at=50, grace=30).action == rule.REAP  # exactly at the end of grace
    assert decide(vjob(), trained(), at=20, grace=0).action == rule.REAP


def test_not_all_workers_succeeded_waits() -> None:
    pods = [pod("j-worker-0", "worker", "Succeeded", finished=10), pod("j-worker-1", "worker", "Running"),
            pod("j-ps-0", "ps", "Running")]
    d = decide(vjob(), pods, at=999)
    assert d.action == rule.WAIT and "1/2 worker" in d.reason
    assert decide(vjob(), [], at=999).action == rule.WAIT  # no pods yet


def test_workers_split_over_several_tasks_are_done_when_every_task_is() -> None:
    """Workers past one Volcano task's limit are several tasks (volcano/slices.py): the first
    task done is not the workers done."""
    job = vjob(tasks={"ps": 1, "worker": 2, "worker-s1": 1})
    first_done = trained()  # worker-0 and worker-1 succeeded, worker-s1-0 still runs
    d = decide(job, [*first_done, pod("j-worker-s1-0", "worker-s1", "Running")], at=999)
    assert d.action == rule.WAIT and "2/3 worker" in d.reason
    d = decide(job, [*first_done, pod("j-worker-s1-0", "worker-s1", "Succeeded", finished=30)], at=999)
    assert d.action == rule.REAP and d.completed_at == T0 + timedelta(seconds=30) and d.lingering == ("j-ps-0",)


def test_chief_is_the_completion_task_when_present() -> None:
    job = vjob(tasks={"ps": 1, "worker": 2, "chief": 1})
    pods = [pod("j-chief-0", "chief", "Succeeded", finished=5), pod("j-worker-0", "worker", "Running"),
            pod("j-worker-1", "worker", "Running"), pod("j-ps-0", "ps", "Running")]
    d = decide(job, pods, at=100)
    assert d.action == rule.REAP and "chief task" in d.reason
    assert d.lingering == ("j-ps-0", "j-worker-0", "j-worker-1")  # CompleteJob ends every pod still running


def test_mpimaster_and_a_named_completion_task() -> None:
    job = vjob(tasks={"mpimaster": 1, "mpiworker": 2})
    pods = [pod("j-mpimaster-0", "mpimaster", "Succeeded", finished=0), pod("j-mpiworker-0", "mpiworker", "Running")]
    assert decide(job, pods, at=60).action == rule.REAP
    custom = vjob(tasks={"ps": 1, "trainer": 1})
    done = [pod("j-trainer-0", "trainer", "Succeeded", finished=0), pod("j-ps-0", "ps", "Running")]
    assert decide(custom, done, at=60).action == rule.SKIP  # no chief/mpimaster/worker
    assert decide(custom, done, at=60, completion_task="trainer").action == rule.REAP
    assert decide(custom, done, at=60, completion_task="nope").action == rule.SKIP


def test_a_failed_pod_without_a_failure_policy_is_never_reaped() -> None:
    pods = [pod("j-worker-0", "worker", "Succeeded", finished=0), pod("j-worker-1", "worker", "Failed", finished=3, exit_code=2),
            pod("j-ps-0", "ps", "Running")]
    d = decide(vjob(), pods, at=999)
    assert d.action == rule.FAILED and d.failed == ("j-worker-1",) and "j-worker-1" in d.reason
    ps_failed = trained(ps_phase="Failed")
    assert decide(vjob(), ps_failed, at=999).action == rule.FAILED


def test_a_failed_pod_that_volcano_will_restart_is_waited_for() -> None:
    pods = [pod("j-worker-0", "worker", "Failed", finished=0), pod("j-ps-0", "ps", "Running")]
    job_level = vjob(policies=[{"event": "PodFailed", "action": "RestartJob"}])
    d = decide(job_level, pods, at=999)
    assert d.action == rule.WAIT and "RestartJob" in d.reason
    task_level = vjob(task_policies={"worker": [{"events": ["PodFailed"], "action": "RestartTask"}]})
    assert decide(task_level, pods, at=999).action == rule.WAIT
    # A policy on another task does not cover the worker.
    other = vjob(task_policies={"ps": [{"event": "PodFailed", "action": "RestartJob"}]})
    assert decide(other, pods, at=999).action == rule.FAILED
    # Only PodEvicted: a failed pod is not handled.
    evicted = vjob(policies=[{"event": "PodEvicted", "action": "RestartJob"}])
    assert decide(evicted, pods, at=999).action == rule.FAILED


@pytest.mark.parametrize("phase", ["Completed", "Failed", "Aborted", "Terminated"])
def test_finished_jobs_need_nothing(phase: str) -> None:
    assert decide(vjob(phase), trained(), at=999).action == rule.DONE


@pytest.mark.parametrize("phase", ["Completing", "Aborting", "Terminating"])
def test_jobs_volcano_is_already_ending_need_nothing(phase: str) -> None:
    d = decide(vjob(phase), trained(), at=999)
    assert d.action == rule.DONE and "already" in d.reason


@pytest.mark.parametrize("phase", ["Pending", "Inqueue", "Restarting", None])
def test_jobs_not_running_yet_wait(phase: str | None) -> None:
    job = vjob("Running")
    job["status"] = {"state": {"phase": phase}} if phase else {}
    assert decide(job, trained(), at=999).action == rule.WAIT


def test_nothing_lingering_is_done_and_deleting_pods_do_not_linger() -> None:
    assert decide(vjob(), trained(ps_phase="Succeeded"), at=999).action == rule.DONE
    assert decide(vjob(), trained(deleting=True), at=999).action == rule.DONE
    assert decide(vjob(), trained()[:2], at=999).action == rule.DONE  # PS pod already gone


def test_pods_of_an_earlier_job_with_the_same_name_are_ignored() -> None:
    stale = [pod("j-worker-0", "worker", "Succeeded", finished=0, uid="old"), pod("j-worker-1", "worker", "Succeeded", finished=0, uid="old"),
             pod("j-ps-0", "ps", "Running")]
    assert decide(vjob(), stale, at=999).action == rule.WAIT


def test_finish_time_falls_back_to_the_ready_condition_then_to_now() -> None:
    p = pod("j-worker-0", "worker", "Succeeded")
    p["status"]["conditions"] = [{"type": "Ready", "status": "False", "lastTransitionTime": stamp(7)}]
    assert rule.pod_finished_at(p) == T0 + timedelta(seconds=7)
    job = vjob(tasks={"ps": 1, "worker": 1})
    bare = [pod("j-worker-0", "worker", "Succeeded"), pod("j-ps-0", "ps", "Running")]
    d = decide(job, bare, at=100, grace=30)
    assert d.action == rule.GRACE and d.completed_at == T0 + timedelta(seconds=100)


def test_reason_lists_at_most_five_lingering_pods() -> None:
    job = vjob(tasks={"ps": 8, "worker": 1})
    pods = [pod("j-worker-0", "worker", "Succeeded", finished=0)] + [pod(f"j-ps-{i}", "ps", "Running") for i in range(8)]
    d = decide(job, pods, at=100)
    assert len(d.lingering) == 8 and "and 3 more" in d.reason


# ----- classic layout -----------------------------------------------------------------------------


def classic(workers: list, servers: list, pods: list, at: float, grace: float = 30, remove: bool = False) -> rule.Decision:
    return rule.decide_classic(workers, servers, pods, now=T0 + timedelta(seconds=at), grace=grace, remove=remove)


def test_classic_complete_workers_and_running_ps_deployment_are_reaped() -> None:
    workers = [batch_job("w0", "Complete", completed=10), batch_job("w1", "Complete", completed=15)]
    d = classic(workers, [deployment("ps")], [ps_pod("ps")], at=100)
    assert d.action == rule.REAP and d.lingering == ("ps",) and d.completed_at == T0 + timedelta(seconds=15)
    assert classic(workers, [deployment("ps")], [ps_pod("ps")], at=20).action == rule.GRACE


def test_classic_waits_for_every_worker_job_and_never_reaps_after_a_failure() -> None:
    assert classic([batch_job("w0", "Complete"), batch_job("w1", None)], [deployment("ps")], [], at=999).action == rule.WAIT
    failed = classic([batch_job("w0", "Complete"), batch_job("w1", "Failed")], [deployment("ps")], [], at=999)
    assert failed.action == rule.FAILED and failed.failed == ("w1",)
    target = classic([batch_job("w0", "FailureTarget")], [deployment("ps")], [], at=999)
    assert target.action == rule.FAILED


def test_classic_scaled_to_zero_is_done_and_remove_mode_still_sees_the_deployment() -> None:
    workers = [batch_job("w0", "Complete")]
    done = classic(workers, [deployment("ps", replicas=0)], [ps_pod("ps", deleting=True)], at=100)
    assert done.action == rule.DONE and "scaled to zero" in done.reason
    stopping = classic(workers, [deployment("ps", replicas=0)], [ps_pod("ps")], at=100)
    assert stopping.action == rule.DONE and "1 pod(s) still stopping" in stopping.reason
    assert classic(workers, [deployment("ps", replicas=0)], [], at=100, remove=True).action == rule.REAP
    assert classic(workers, [], [], at=100).action == rule.DONE
    assert classic([], [deployment("ps")], [], at=100).action == rule.SKIP


def test_completion_time_falls_back_to_the_condition() -> None:
    job = batch_job("w0", "Complete", completed=40)
    del job["status"]["completionTime"]
    d = classic([job], [deployment("ps")], [], at=45)
    assert d.action == rule.GRACE and d.completed_at == T0 + timedelta(seconds=40)


# ----- expiring Deployments and grouping ----------------------------------------------------------

def test_expiry_is_decided_by_its_annotation() -> None:
    expiring = deployment("tb", annotations={rule.EXPIRES_ANNOTATION: stamp(60)})
    assert rule.decide_expiry(expiring, now=T0).action == rule.GRACE
    assert rule.decide_expiry(expiring, now=T0 + timedelta(seconds=60)).action == rule.REAP
    broken = deployment("tb", annotations={rule.EXPIRES_ANNOTATION: "tomorrow"})
    assert rule.decide_expiry(broken, now=T0).action == rule.SKIP


def test_grouping_by_label_keeps_groups_apart_and_never_treats_our_deployments_as_servers() -> None:
    jobs = [batch_job("a-w0", "Complete", group="a"), batch_job("b-w0", None, group="b"), batch_job("x", "Complete", group=None)]
    deploys = [deployment("a-ps", group="a"), deployment("b-ps", group="b"), deployment("lonely", group="c"),
               deployment("tb", group="a", labels={"volcano-pipelines/step": "tensorboard"}),
               deployment("old-tb", group="a", annotations={rule.EXPIRES_ANNOTATION: stamp(0)})]
    pods = [ps_pod("a-ps"), pod("j-ps-0", "ps", "Running")]
    units = rule.group_units([vjob()], jobs, deploys, pods, group_label="group")
    by_key = {u.key: u for u in units}
    assert set(by_key) == {("volcano", "ns", "j"), ("classic", "ns", "group=a"), ("classic", "ns", "group=b"),
                           ("expiry", "ns", "old-tb")}
    a = by_key[("classic", "ns", "group=a")]
    assert [rule._meta(d)["name"] for d in a.servers] == ["a-ps"]  # not the tensorboard, not the expiring one
    assert [rule._meta(p)["name"] for p in a.pods] == ["a-ps-abc"]
    assert [rule._meta(p)["name"] for p in by_key[("volcano", "ns", "j")].pods] == ["j-ps-0"]
    whole = rule.group_units([], jobs, deploys, pods)  # one group per namespace
    assert [u.key for u in whole if u.kind == "classic"] == [("classic", "ns", "")]
    assert whole[0].describe() in ("namespace ns", "deployment ns/old-tb")


def test_selector_matching() -> None:
    labels = {"app": "x", "tier": "ps"}
    assert rule.selector_matches({"matchLabels": {"app": "x"}}, labels)
    assert not rule.selector_matches({"matchLabels": {"app": "y"}}, labels)
    assert not rule.selector_matches({}, labels) and not rule.selector_matches(None, labels)
    def expr(op: str, values: list[str] | None = None) -> dict[str, Any]:
        return {"matchExpressions": [{"key": "tier", "operator": op, "values": values or []}]}

    assert rule.selector_matches(expr("In", ["ps", "w"]), labels) and not rule.selector_matches(expr("NotIn", ["ps"]), labels)
    assert rule.selector_matches(expr("Exists"), labels) and not rule.selector_matches(expr("DoesNotExist"), labels)


@pytest.mark.parametrize("text", ["app=x", "app==x,tier!=ps", "!gone", "env in (a, b),team notin (c)", "a.b/c-d=e_f", "exists"])
def test_good_selectors(text: str) -> None:
    check_selector("selector", text)


@pytest.mark.parametrize("text", ["", "  ", "app=x,", "=x", "app=x y", "app in a,b", "!a=b", "bad key=x", "app=" + "v" * 64, "a=(b)"])
def test_bad_selectors(text: str) -> None:
    with pytest.raises(InputError) as err:
        check_selector("selector", text)
    assert err.value.field == "selector"
