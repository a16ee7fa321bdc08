"""`vpipe train --no-wait` and `--on-cancel keep` against the real control plane: a submission
that went through is a success (exit 0, the job left Pending or Running: what an Argo step
with wait=false runs), and a cancelled step with keep leaves the job running, not Aborted."""

from __future__ import annotations

import signal
import time

import pytest

from tests.cluster import behaviour
from tests.helpers.train_cluster import CODE_URL, Observer, _label_args, _start, _vpipe
from tests.helpers.vpipe import finish as _finish
from tests.integration.waiting import wait_for

pytestmark = pytest.mark.integration


def test_no_wait_exits_0_once_the_job_is_submitted(cluster, namespace: str) -> None:
    seen = Observer(cluster, namespace)
    run = _vpipe(cluster, "train", "tf", "--name", "nowait", "--namespace", namespace, "--ps", "1", "--workers", "1",
                 "--code-url", CODE_URL, "--no-wait", *_label_args("worker", behaviour.keep_running()))
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["created"] is True
    assert run.result["phase"] in ("Pending", "Running") and run.result["succeeded"] is False
    # The job runs on without the step.
    wait_for("pods Running", lambda: sum(p.status.phase == "Running" for p in seen.poll()) == 2, timeout=120,
             explain=seen.explain)
    assert seen.job("nowait")["status"]["state"]["phase"] == "Running"


def test_on_cancel_keep_leaves_the_job_running(cluster, namespace: str) -> None:
    seen = Observer(cluster, namespace)
    proc = _start(cluster, "train", "tf", "--name", "kept", "--namespace", namespace, "--ps", "1", "--workers", "1",
                  "--code-url", CODE_URL, "--on-cancel", "keep", *_label_args("worker", behaviour.keep_running()))
    wait_for("pods Running", lambda: sum(p.status.phase == "Running" for p in seen.poll()) == 2, timeout=120,
             explain=seen.explain)
    proc.send_signal(signal.SIGTERM)
    run = _finish(proc, timeout=60)
    assert run.returncode == 1 and "kept" in run.stderr, run.stderr
    time.sleep(5)  # long enough for an abort or delete sent on the way out to show
    assert seen.job("kept")["status"]["state"]["phase"] == "Running"
    assert sum(p.status.phase == "Running" for p in seen.poll()) == 2


def test_a_job_that_is_not_waited_for_outlives_the_owner_it_was_given(cluster, namespace: str) -> None:
    """What the Argo template and KFP's pod identity hand every train step (the run's Workflow as
    owner) must not reach a job submitted with --no-wait: the Workflow's TTL would garbage-collect
    a job still training. A ConfigMap stands in for the Workflow as the owner that goes away."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "the-run"}})
    reference = f"v1/ConfigMap/the-run/{owner.metadata.uid}"
    seen = Observer(cluster, namespace)
    run = _vpipe(cluster, "train", "tf", "--name", "orphan", "--namespace", namespace, "--ps", "1", "--workers", "1",
                 "--code-url", CODE_URL, "--no-wait", "--owner", reference,
                 *_label_args("worker", behaviour.keep_running()))
    assert run.returncode == 0, run.stderr
    assert "not set on the job: the step does not wait" in run.stderr
    assert not seen.job("orphan")["metadata"].get("ownerReferences")
    # The same owner on a waited-for job is set (the garbage collector then deletes the job with it).
    waited = _start(cluster, "train", "tf", "--name", "owned", "--namespace", namespace, "--ps", "1", "--workers",
                    "1", "--code-url", CODE_URL, "--owner", reference, *_label_args("worker", behaviour.keep_running()))
    try:
        owners = wait_for("the waited-for job", lambda: (seen.job("owned") or {}).get("metadata", {}).get(
            "ownerReferences"), timeout=60)
        assert [o["uid"] for o in owners] == [owner.metadata.uid]
        core.delete_namespaced_config_map("the-run", namespace)
        wait_for("the owned job garbage-collected", lambda: seen.job("owned") is None, timeout=60)
    finally:
        waited.send_signal(signal.SIGTERM)
        _finish(waited, timeout=60)
    assert seen.job("orphan")["status"]["state"]["phase"] in ("Pending", "Running")
