"""The reap rule's details test_reap_decision leaves open (found by scripts/mutation on
lifecycle/reap.py): what a decision carries besides its action (due time, completion time,
what lingers), defaults a missing field stands for, selector operators, namespaces, and which
rule decide() hands each kind of unit to."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from tests.helpers.reaping import T0, batch_job, deployment, ps_pod, stamp
from volcano_pipelines.lifecycle import reap as rule


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_describe_names_each_kind_of_unit() -> None:
    assert rule.Unit("volcano", "ns", "j").describe() == "job ns/j"
    assert rule.Unit("expiry", "ns", "tb").describe() == "deployment ns/tb"
    assert rule.Unit("classic", "ns", "group=a").describe() == "group ns/group=a"
    assert rule.Unit("classic", "ns", "").describe() == "namespace ns"


def test_parse_time_reads_utc_offsets_and_naive_times_as_utc() -> None:
    assert rule.parse_time("2026-01-01T12:00:00Z") == T0
    assert rule.parse_time("2026-01-01T14:00:00+02:00") == T0
    naive = rule.parse_time("2026-01-01T12:00:00")
    assert naive == T0 and naive is not None and naive.tzinfo == timezone.utc
    assert rule.parse_time("") is None and rule.parse_time(None) is None and rule.parse_time("noon") is None


def test_a_classic_group_in_grace_says_when_and_what() -> None:
    workers = [batch_job("w0", "Complete", completed=10)]
    d = rule.decide_classic(workers, [deployment("ps")], [ps_pod("ps")], now=at(20), grace=30)
    assert d.action == rule.GRACE and d.lingering == ("ps",)
    assert d.completed_at == at(10) and d.due_at == at(40)
    assert d.reason.startswith("the worker Jobs finished 10s ago; ps still run")


def test_classic_defaults_keep_servers_and_replicas_as_kubernetes_reads_them() -> None:
    workers = [batch_job("w0", "Complete", completed=10)]
    at_zero = deployment("ps", replicas=0)
    assert rule.decide_classic(workers, [at_zero], [], now=at(100), grace=0).action == rule.DONE  # remove defaults to False
    unset = deployment("ps")
    del unset["spec"]["replicas"]  # a Deployment without replicas runs one
    d = rule.decide_classic(workers, [unset], [], now=at(100), grace=0)
    assert d.action == rule.REAP and d.lingering == ("ps",)
    nameless = deployment("ps")
    del nameless["metadata"]["name"]
    assert rule.decide_classic(workers, [nameless], [], now=at(100), grace=0).lingering == ("?",)
    failed = batch_job("w1", "Failed")
    del failed["metadata"]["name"]
    assert rule.decide_classic([failed], [], [], now=at(100), grace=0).failed == ("?",)


def test_classic_completion_prefers_completion_time_then_the_condition_then_now() -> None:
    job = batch_job("w0", "Complete", completed=40)
    job["status"]["conditions"][0]["lastTransitionTime"] = stamp(70)
    assert rule.decide_classic([job], [deployment("ps")], [], now=at(100), grace=0).completed_at == at(40)
    bare = batch_job("w0", "Complete", completed=None)
    bare["status"]["conditions"][0].pop("lastTransitionTime")
    d = rule.decide_classic([bare], [deployment("ps")], [], now=at(100), grace=30)
    assert d.action == rule.GRACE and d.completed_at == at(100)  # unknown: the grace starts now
    done = rule.decide_classic([job], [], [], now=at(100), grace=0)
    assert done.action == rule.DONE and done.completed_at == at(40)
    assert "no parameter server Deployments" in done.reason


def test_pods_of_another_namespace_are_not_the_groups() -> None:
    workers = [batch_job("w0", "Complete")]
    elsewhere = ps_pod("ps")
    elsewhere["metadata"]["namespace"] = "other"
    d = rule.decide_classic(workers, [deployment("ps", replicas=0)], [elsewhere], now=at(100), grace=0)
    assert d.action == rule.DONE and "still stopping" not in d.reason
    here = rule.decide_classic(workers, [deployment("ps", replicas=0)], [ps_pod("ps"), ps_pod("ps")], now=at(100), grace=0)
    assert "2 pod(s) still stopping" in here.reason


def test_selector_operators_refuse_what_they_should() -> None:
    labels = {"app": "x", "tier": "ps"}

    def expr(key: str, op: str, values: list[str] | None = None) -> dict[str, Any]:
        return {"matchExpressions": [{"key": key, "operator": op, "values": values or []}]}

    assert not rule.selector_matches({"matchLabels": {}, "matchExpressions": []}, labels)
    assert not rule.selector_matches(expr("tier", "In", ["w"]), labels)
    assert not rule.selector_matches(expr("zone", "In", ["a"]), labels)
    assert not rule.selector_matches(expr("zone", "Exists"), labels)
    assert rule.selector_matches(expr("zone", "DoesNotExist"), labels)
    assert rule.selector_matches(expr("zone", "NotIn", ["a"]), labels)
    assert rule.selector_matches(expr("tier", "NotIn", ["w"]), labels)
    both = {"matchLabels": {"app": "x"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["w"]}]}
    assert not rule.selector_matches(both, labels)


def test_expiry_decisions_carry_their_times_and_name() -> None:
    expiring = deployment("tb", annotations={rule.EXPIRES_ANNOTATION: stamp(60)})
    grace = rule.decide_expiry(expiring, now=T0)
    assert (grace.due_at, grace.lingering, grace.reason) == (at(60), ("tb",), f"expires at {stamp(60)}")
    reap = rule.decide_expiry(expiring, now=at(61))
    assert (reap.completed_at, reap.lingering, reap.reason) == (at(60), ("tb",), f"expired at {stamp(60)}")
    del expiring["metadata"]["name"]
    assert rule.decide_expiry(expiring, now=at(61)).lingering == ("?",)
    broken = rule.decide_expiry(deployment("tb", annotations={rule.EXPIRES_ANNOTATION: "x"}), now=T0)
    assert broken.action == rule.SKIP and "'x'" in broken.reason


def test_decide_hands_each_unit_to_its_rule() -> None:
    expiring = deployment("tb", annotations={rule.EXPIRES_ANNOTATION: stamp(60)})
    unit = rule.Unit("expiry", "ns", "tb", obj=expiring)
    assert rule.decide(unit, now=T0, grace=0).action == rule.GRACE
    assert rule.decide(unit, now=at(60), grace=0).action == rule.REAP
    group = rule.Unit("classic", "ns", "", workers=(batch_job("w0", "Complete"),), servers=(deployment("ps", replicas=0),))
    assert rule.decide(group, now=at(100), grace=0).action == rule.DONE
    assert rule.decide(group, now=at(100), grace=0, remove=True).action == rule.REAP
