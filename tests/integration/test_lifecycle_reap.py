"""`vpipe reap` against the real control plane: Volcano's job controller consumes the
Commands, kube-controller-manager's Job and ReplicaSet controllers run the classic layout,
kwok completes workers and keeps parameter servers running (tests/cluster/behaviour.py)."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from kubernetes import client

from tests.cluster import behaviour
from tests.helpers.lifecycle import Cluster, volcano_job
from tests.helpers.vpipe import finish, start, vpipe
from tests.integration.waiting import wait_for

pytestmark = pytest.mark.integration


def test_volcano_job_without_the_policy_is_completed_then_rerun_is_harmless(kube: Cluster) -> None:
    kube.create_job(volcano_job("nopolicy", kube.namespace))
    run = vpipe(kube.kubeconfig, "reap", "nopolicy", "-n", kube.namespace, "--grace", "1", "--timeout", "180")
    assert run.returncode == 0, run.stderr
    assert run.result is not None
    [reaped] = run.result["reaped"]
    assert (reaped["kind"], reaped["name"], reaped["action"]) == ("volcano", "nopolicy", "completed")
    assert reaped["ps_pods"] == ["nopolicy-ps-0"] and reaped["completed_at"]
    # The step ended when the parameter servers were gone, and measured how long they lingered.
    assert run.result["ps_linger_seconds"] is not None and run.result["ps_linger_seconds"] >= 1
    assert "nopolicy-ps-0" not in kube.job_pods("nopolicy")
    wait_for("job Completed", lambda: kube.phase("nopolicy") == "Completed", timeout=60, explain=kube.explain)
    [event] = kube.events("nopolicy")
    assert event.reason == "ParameterServersReaped" and "CompleteJob" in event.message

    again = vpipe(kube.kubeconfig, "reap", "nopolicy", "-n", kube.namespace, "--grace", "1", "--timeout", "60")
    assert again.returncode == 0, again.stderr
    assert again.result is not None and again.result["reaped"] == [] and "nothing to reap" in again.result["message"]
    assert len(kube.events("nopolicy")) == 1  # no second Command, no second Event


def test_dry_run_changes_nothing(kube: Cluster) -> None:
    kube.create_job(volcano_job("dry", kube.namespace))
    wait_for("workers succeeded", lambda: kube.workers_done("dry"), timeout=120, explain=kube.explain)
    run = vpipe(kube.kubeconfig, "reap", "dry", "-n", kube.namespace, "--grace", "0", "--dry-run")
    assert run.returncode == 0, run.stderr
    assert run.result is not None and [r["action"] for r in run.result["reaped"]] == ["would complete"]
    time.sleep(3)  # what a Command would have done by now
    assert kube.job_pods("dry").get("dry-ps-0") == "Running" and kube.phase("dry") == "Running"
    assert kube.events("dry") == []


def test_a_job_whose_worker_failed_is_left_alone_and_reported_then_aborted_on_request(kube: Cluster) -> None:
    kube.create_job(volcano_job("broken", kube.namespace, worker_labels=behaviour.fail_with(3)))
    wait_for("a worker failed", lambda: "Failed" in kube.job_pods("broken").values(), timeout=120, explain=kube.explain)
    run = vpipe(kube.kubeconfig, "reap", "broken", "-n", kube.namespace, "--grace", "0", "--timeout", "60")
    assert run.returncode == 1, run.stderr
    assert run.result is not None and run.result["reaped"] == []
    [failed] = run.result["failed"]
    assert failed["action"] == "reported" and "broken-worker-" in failed["reason"]
    assert "never reaped" in run.result["message"]
    assert kube.job_pods("broken").get("broken-ps-0") == "Running" and kube.phase("broken") == "Running"

    aborted = vpipe(kube.kubeconfig, "reap", "broken", "-n", kube.namespace, "--on-failure", "abort", "--timeout", "60")
    assert aborted.returncode == 1 and aborted.result is not None
    assert aborted.result["failed"][0]["action"] == "aborted"
    wait_for("job Aborted", lambda: kube.phase("broken") == "Aborted", timeout=60, explain=kube.explain)
    assert [e.reason for e in kube.events("broken")] == ["WorkersFailedAborted"]


def test_classic_layout_parameter_servers_are_scaled_to_zero_and_nothing_else_is_touched(kube: Cluster) -> None:
    kube.classic("cl", {"app": "cl"})
    kube.classic("other", {"app": "other"})  # same namespace, not selected: must stay as it is
    wait_for("worker Jobs complete", lambda: kube.batch_jobs_complete("cl") and kube.batch_jobs_complete("other"),
             timeout=120, explain=kube.explain)
    wait_for("parameter servers running", lambda: list(kube.pods("vpipe-test/role in (cl-ps, other-ps)").values()) == ["Running"] * 2,
             timeout=60, explain=kube.explain)
    run = vpipe(kube.kubeconfig, "reap", "--selector", "app=cl", "-n", kube.namespace, "--once", "--grace", "0",
                "--group-label", "app", "--timeout", "120")
    assert run.returncode == 0, run.stderr
    assert run.result is not None
    [reaped] = run.result["reaped"]
    assert (reaped["kind"], reaped["name"], reaped["action"]) == ("classic", "app=cl", "scaled")
    assert reaped["linger_seconds"] is not None and reaped["ps_pods"] and reaped["ps_pods"][0].startswith("cl-ps-")
    assert kube.replicas("cl-ps") == 0 and kube.pods("vpipe-test/role=cl-ps") == {}
    assert kube.replicas("other-ps") == 1 and list(kube.pods("vpipe-test/role=other-ps").values()) == ["Running"]
    assert [e.reason for e in kube.events("cl-ps")] == ["ParameterServersReaped"] and kube.events("other-ps") == []

    again = vpipe(kube.kubeconfig, "reap", "--selector", "app=cl", "-n", kube.namespace, "--once", "--grace", "0",
                  "--group-label", "app", "--timeout", "60")
    assert again.returncode == 0 and again.result is not None and again.result["reaped"] == []
    assert len(kube.events("cl-ps")) == 1


def test_classic_failed_worker_is_reported_and_delete_deployment_removes_the_servers(kube: Cluster) -> None:
    kube.classic("bad", {"app": "bad"}, fail=True)
    kube.classic("good", {"app": "good"})
    wait_for("worker Jobs finished", lambda: kube.batch_jobs_complete("good") and _failed(kube, "bad-worker-0"),
             timeout=120, explain=kube.explain)
    run = vpipe(kube.kubeconfig, "reap", "--selector", "app in (bad,good)", "-n", kube.namespace, "--once", "--grace", "0",
                "--group-label", "app", "--delete-deployment", "--timeout", "120")
    assert run.returncode == 0, run.stderr
    assert run.result is not None
    assert [(r["name"], r["action"]) for r in run.result["reaped"]] == [("app=good", "deleted")]
    assert [(f["name"], f["action"]) for f in run.result["failed"]] == [("app=bad", "reported")]
    assert kube.replicas("good-ps") is None and kube.replicas("bad-ps") == 1


def _failed(kube: Cluster, job: str) -> bool:
    status = kube.batch.read_namespaced_job(job, kube.namespace).status
    return any(c.type == "Failed" and c.status == "True" for c in (status.conditions or []))


def test_the_sweeper_reaps_jobs_that_appear_while_it_runs(kube: Cluster) -> None:
    sweeper = start(kube.kubeconfig, "reap", "--selector", "team=sweep", "-n", kube.namespace, "--grace", "0",
                    "--timeout", "240")
    try:
        time.sleep(3)  # the sweeper is listing and watching before any job exists
        kube.create_job(volcano_job("late-a", kube.namespace, labels={"team": "sweep"}))
        kube.create_job(volcano_job("late-b", kube.namespace, labels={"team": "sweep"}, workers=1))
        kube.create_job(volcano_job("not-mine", kube.namespace, labels={"team": "other"}))
        wait_for("both selected jobs Completed",
                 lambda: kube.phase("late-a") == "Completed" and kube.phase("late-b") == "Completed",
                 timeout=180, explain=kube.explain)
        wait_for("the unselected job's workers done", lambda: kube.workers_done("not-mine"), timeout=60)
        sweeper.send_signal(signal.SIGTERM)
        run = finish(sweeper, timeout=60)
    finally:
        if sweeper.poll() is None:
            sweeper.kill()
    assert run.returncode == 0, run.stderr
    assert run.result is not None
    assert sorted((r["name"], r["action"]) for r in run.result["reaped"]) == [("late-a", "completed"), ("late-b", "completed")]
    assert all(r["linger_seconds"] is not None for r in run.result["reaped"]), run.result
    assert kube.phase("not-mine") == "Running" and kube.job_pods("not-mine")["not-mine-ps-0"] == "Running"


def test_delete_namespace_is_refused_while_it_holds_foreign_objects(kube: Cluster) -> None:
    kube.classic("ns", {"app": "whole"})
    kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "someone-elses"}, "data": {"a": "b"}})
    wait_for("worker Jobs complete", lambda: kube.batch_jobs_complete("ns"), timeout=120, explain=kube.explain)
    args = ["reap", "--selector", "app=whole", "-n", kube.namespace, "--once", "--grace", "0", "--delete-namespace",
            "--timeout", "120"]
    refused = vpipe(kube.kubeconfig, *args)
    assert refused.returncode == 0, refused.stderr
    assert refused.result is not None and refused.result["reaped"] == []
    [entry] = refused.result["failed"]
    assert entry["action"] == "refused" and "ConfigMap someone-elses" in entry["reason"]
    assert kube.core.read_namespace(kube.namespace).status.phase == "Active" and kube.replicas("ns-ps") == 1

    kube.core.delete_namespaced_config_map("someone-elses", kube.namespace)
    done = vpipe(kube.kubeconfig, *args)
    assert done.returncode == 0, done.stderr
    assert done.result is not None and [r["action"] for r in done.result["reaped"]] == ["namespace-deleted"]
    # Gone entirely (the namespace fixture's own delete would conflict with a Terminating one).
    wait_for("namespace deleted", lambda: _namespace_phase(kube) is None, timeout=150, interval=1)


def _namespace_phase(kube: Cluster) -> str | None:
    try:
        return kube.core.read_namespace(kube.namespace).status.phase
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def test_a_missing_job_fails_cleanly(kube: Cluster) -> None:
    run = vpipe(kube.kubeconfig, "reap", "ghost", "-n", kube.namespace, "--timeout", "30")
    assert run.returncode == 1 and run.result is not None and "not found" in run.result["message"]
    assert "Traceback" not in run.stderr


def test_a_named_completion_task_that_the_job_lacks_is_bad_input(kube: Cluster) -> None:
    kube.create_job(volcano_job("named", kube.namespace))
    run = vpipe(kube.kubeconfig, "reap", "named", "-n", kube.namespace, "--completion-task", "chief", "--timeout", "60")
    assert run.returncode == 2, run.stderr
    assert "--completion-task" in run.stderr and "ps, worker" in run.stderr
    assert kube.events("named") == []


def test_one_sweep_over_all_namespaces(kube: Cluster) -> None:
    mark = f"sweep-{uuid.uuid4().hex[:8]}"  # other tests' jobs share the cluster: select only ours
    kube.create_job(volcano_job("everywhere", kube.namespace, labels={"vpipe-test/mark": mark}))
    wait_for("workers succeeded", lambda: kube.workers_done("everywhere"), timeout=120, explain=kube.explain)
    run = vpipe(kube.kubeconfig, "reap", "--selector", f"vpipe-test/mark={mark}", "--all-namespaces", "--once",
                "--grace", "0", "--timeout", "120")
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["scope"] == f"all namespaces, selector vpipe-test/mark={mark}"
    assert [(r["namespace"], r["name"], r["action"]) for r in run.result["reaped"]] == [(kube.namespace, "everywhere", "completed")]
    wait_for("job Completed", lambda: kube.phase("everywhere") == "Completed", timeout=60, explain=kube.explain)
