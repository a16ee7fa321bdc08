"""`vpipe train` against the real control plane (kube-apiserver + Volcano + kwok).

Every test drives the CLI as a user or a pipeline would (a subprocess, `--json` result on
stdout), and checks both what the step reports and what really happened in the cluster.
Pod behaviour (complete, fail, keep running) is chosen with the labels of
tests/cluster/behaviour.py through `--pod-label`.
"""

from __future__ import annotations

import signal
import uuid
from typing import Any

import pytest

from tests.cluster import behaviour
from tests.helpers.train_cluster import CODE_URL, Observer, _label_args, _start, _vpipe
from tests.helpers.vpipe import finish
from tests.integration.waiting import wait_for

pytestmark = pytest.mark.integration


def _env(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}


def test_tf_ps_workers_complete(cluster, namespace: str) -> None:
    name = "tf"
    seen = Observer(cluster, namespace)
    proc = _start(cluster, "train", "tf", "--name", name, "--namespace", namespace, "--ps", "1", "--workers", "2",
                  "--code-url", CODE_URL, *_label_args("worker", behaviour.run_for(4)))
    seen.watch(proc)
    run = finish(proc)
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["phase"] == "Completed"
    assert run.result["name"] == name and run.result["namespace"] == namespace
    assert run.result["failure"] is None
    assert run.result["duration_seconds"] is not None and run.result["duration_seconds"] >= 4

    group = seen.podgroups.get(name)
    assert group is not None and group["spec"]["minMember"] == 3

    ps, workers = f"{name}-ps-0", [f"{name}-worker-0", f"{name}-worker-1"]
    assert set(seen.pods) == {ps, *workers}
    for pod_name, pod in seen.pods.items():
        assert "Running" in seen.phases[pod_name], pod_name
        assert pod.spec.node_name and pod.spec.node_name.startswith("kwok-node-")
        assert pod.spec.hostname == pod_name and pod.spec.subdomain == name
    for worker in workers:
        assert "Succeeded" in seen.phases[worker]
    assert "Succeeded" not in seen.phases[ps]

    # The hosts Volcano's svc plugin publishes are the ones TF_CONFIG is built from.
    hosts = seen.config_maps[f"{name}-svc"]
    assert hosts["ps.host"].split() == [f"{ps}.{name}"]
    assert hosts["worker.host"].split() == [f"{w}.{name}" for w in workers]
    # Each pod carries the counts its entry point checks those files against, and no host list.
    for pod in seen.pods.values():
        env = _env(pod)
        assert env["VPIPE_TF_TASKS"] == "ps=1,worker=2" and env["VPIPE_TF_PORT"] == "2222"
        assert not any(f"{ps}.{name}" in value for value in env.values())

    # CompleteJob deleted the parameter server; the job record says Completed.
    wait_for("PS pod gone", lambda: ps not in seen.pod_names(), timeout=30)
    job = seen.job(name)
    assert job is not None and job["status"]["state"]["phase"] == "Completed"
    # Volcano drops taskStatusCount from a finished job's status, so the step must report
    # the counts it saw (or count pods): users read "2 workers succeeded" from the result.
    assert run.result["tasks"]["worker"]["succeeded"] == 2, run.result["tasks"]


def test_gang_that_cannot_fit_times_out_and_aborts(cluster, namespace: str) -> None:
    """3 workers x 4 GPUs on nodes of 2 GPUs each: the gang never fits, no pod is bound."""
    name = "gang"
    seen = Observer(cluster, namespace)
    proc = _start(cluster, "train", "tf", "--name", name, "--namespace", namespace, "--ps", "1", "--workers", "3",
                  "--gpus-per-worker", "4", "--code-url", CODE_URL, "--timeout", "25")
    seen.watch(proc)
    run = finish(proc)
    assert run.returncode == 1, run.stderr
    assert run.result is not None and run.result["phase"] in ("Aborting", "Aborted")
    assert "timed out" in (run.result["message"] or "")
    assert all(not pod.spec.node_name for pod in seen.pods.values()), "no pod of an unfit gang may be bound"
    # While waiting the step showed why the scheduler did not place the gang.
    reason_words = ("nvidia.com/gpu", "Insufficient", "Unschedulable", "NotEnoughResources", "not enough")
    assert any(word in run.stderr for word in reason_words), run.stderr
    job = seen.job(name)
    assert job is not None
    assert wait_for("job Aborted", lambda: (seen.job(name) or {}).get("status", {}).get("state", {}).get("phase") == "Aborted", timeout=60)


def test_mpi_master_completes(cluster, namespace: str) -> None:
    name = "mpi"
    seen = Observer(cluster, namespace)
    proc = _start(cluster, "train", "mpi", "--name", name, "--namespace", namespace, "--workers", "2",
                  "--command", "python train.py", "--code-url", CODE_URL)
    seen.watch(proc)
    run = finish(proc)
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["phase"] == "Completed"

    secret = seen.secrets[f"{name}-ssh"]  # Volcano's ssh plugin
    assert {"authorized_keys", "id_rsa", "id_rsa.pub"} <= set(secret)
    hosts = seen.config_maps[f"{name}-svc"]
    assert hosts["mpiworker.host"].split() == [f"{name}-mpiworker-{i}.{name}" for i in range(2)]
    master = f"{name}-mpimaster-0"
    assert "Succeeded" in seen.phases[master]
    for i in range(2):
        worker = f"{name}-mpiworker-{i}"
        assert "Running" in seen.phases[worker] and "Succeeded" not in seen.phases[worker]
    wait_for("MPI workers gone", lambda: not {f"{name}-mpiworker-0", f"{name}-mpiworker-1"} & seen.pod_names(), timeout=30)


def test_failing_worker_retries_then_fails(cluster, namespace: str) -> None:
    name = "fails"
    seen = Observer(cluster, namespace)
    proc = _start(cluster, "train", "tf", "--name", name, "--namespace", namespace, "--ps", "1", "--workers", "2",
                  "--code-url", CODE_URL, "--max-retry", "2", *_label_args("worker", behaviour.fail_with(3)))
    seen.watch(proc)
    run = finish(proc)
    assert run.returncode == 1, run.stderr
    result = run.result
    assert result is not None and result["phase"] == "Failed"
    assert result["retries"] == 1  # --max-retry 2: two runs, one restart (Volcano counts the final failure too)
    failure = result["failure"]
    assert failure is not None
    assert failure["pod"].startswith(f"{name}-worker-")
    assert failure["exit_code"] == 3
    assert failure["reason"] == behaviour.FAIL_REASON
    # Volcano really restarted the job: the same pod name came back as new pods. --max-retry 2
    # means 2 runs in all (one restart), not 2 restarts: Volcano fails the job when its
    # RetryCount, counted up at each restart, reaches maxRetry (README, --help). The PS never
    # fails, so it is created once per run: exactly twice. A failing worker came back a third
    # time once in CI (Volcano's controller re-created it between the restart's deletion and
    # the job's next phase; the job still ended after two runs, retries 2), so a worker is
    # bounded, not counted exactly.
    assert len(seen.uids[f"{name}-ps-0"]) == 2, seen.uids
    workers = {pod: uids for pod, uids in seen.uids.items() if pod.startswith(f"{name}-worker-")}
    assert sorted(workers) == [f"{name}-worker-0", f"{name}-worker-1"], seen.uids
    assert all(2 <= len(uids) <= 3 for uids in workers.values()), seen.uids
    # The step's message names the pod, the exit code and the reason.
    message = result["message"] or ""
    assert failure["pod"] in message and "exit code 3" in message and behaviour.FAIL_REASON in message, message


def test_step_survives_apiserver_restart(cluster, namespace: str) -> None:
    plane = cluster.require_local()
    name = "restart"
    seen = Observer(cluster, namespace)
    proc = _start(cluster, "train", "tf", "--name", name, "--namespace", namespace, "--ps", "1", "--workers", "2",
                  "--code-url", CODE_URL, *_label_args("worker", behaviour.run_for(20)))
    try:
        wait_for("workers Running", lambda: sum(p.status.phase == "Running" for p in seen.poll()) == 3, timeout=120,
                  explain=seen.explain)
        plane.restart_apiserver(downtime=3)
        run = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["phase"] == "Completed"


def test_killed_step_reattaches_with_same_run_id(cluster, namespace: str) -> None:
    name = "attach"
    run_id = uuid.uuid4().hex[:12]
    args = ["train", "tf", "--name", name, "--namespace", namespace, "--ps", "1", "--workers", "2",
            "--code-url", CODE_URL, "--run-id", run_id, *_label_args("worker", behaviour.run_for(15))]
    seen = Observer(cluster, namespace)
    first = _start(cluster, *args)
    wait_for("job created", lambda: seen.job(name) is not None, timeout=60)
    wait_for("pods Running", lambda: any(p.status.phase == "Running" for p in seen.poll()), timeout=120,
              explain=seen.explain)
    first.send_signal(signal.SIGKILL)  # no chance to clean up, like a lost pipeline pod
    first.communicate(timeout=30)
    uid = seen.job(name)["metadata"]["uid"]

    run = _vpipe(cluster, *args)
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["phase"] == "Completed"
    assert run.result["created"] is False
    jobs = seen.jobs()
    assert len(jobs) == 1 and jobs[0]["metadata"]["uid"] == uid


def test_sigterm_with_on_cancel_delete_removes_job(cluster, namespace: str) -> None:
    name = "cancel"
    seen = Observer(cluster, namespace)
    proc = _start(cluster, "train", "tf", "--name", name, "--namespace", namespace, "--ps", "1", "--workers", "2",
                  "--code-url", CODE_URL, "--on-cancel", "delete", *_label_args("worker", behaviour.keep_running()))
    wait_for("pods Running", lambda: sum(p.status.phase == "Running" for p in seen.poll()) == 3, timeout=120,
                  explain=seen.explain)
    proc.send_signal(signal.SIGTERM)
    run = finish(proc, timeout=60)
    assert run.returncode != 0
    wait_for("job deleted", lambda: seen.job(name) is None, timeout=30)
    wait_for("pods deleted", lambda: not seen.pod_names(), timeout=60)

