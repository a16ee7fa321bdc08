"""The local backend against the backend protocol, with a small bash entry point instead of
TensorFlow: the rendered Job's real container script fetches it over HTTP and runs it with the
contract's arguments. What each task does comes from the job's own arguments
(`--<task>=<behaviour>`), so one run.sh serves every test."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers.local_jobs import Local, Output, RUN_SH, alive, manifest, records, replica, run_job
from volcano_pipelines.backends.local import LocalBackend
from volcano_pipelines.errors import InputError
from volcano_pipelines.localjob.processes import marked_processes
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, TFJobSpec
from volcano_pipelines.volcano.status import job_status, pod_failure
from volcano_pipelines.volcano.tf import build_tf_job


@pytest.fixture
def code_url(code_server) -> str:
    (code_server.root / "run.sh").write_text(RUN_SH)
    return code_server.url


def no_process_of(local: Local, name: str) -> bool:
    return all(not marked_processes(r["uid"]) for r in local.backend.replicas("default", name))


def test_each_replica_gets_the_environment_volcano_would_give_it(local: Local, code_url: str) -> None:
    job = manifest(code_url, "envjob", ps=1, workers=2, chief=True, args=("--chief=after-peers:4",))
    out = run_job(local, job)
    assert out.job["status"]["state"]["phase"] == "Completed"
    seen = records(local)
    assert sorted(seen) == ["chief-0", "ps-0", "worker-0", "worker-1"]

    # One address, a port of its own per pod; each role's view of the same cluster.
    tf_configs = {key: json.loads(r["env"]["TF_CONFIG"]) for key, r in seen.items()}
    cluster = tf_configs["chief-0"]["cluster"]
    assert set(cluster) == {"chief", "ps", "worker"}
    addresses = [a for hosts in cluster.values() for a in hosts]
    assert all(a.startswith("127.0.0.1:") for a in addresses) and len(set(addresses)) == 4
    for key, config in tf_configs.items():
        task, index = key.rsplit("-", 1)
        own = {index: cluster[task][int(index)]}
        view = {"chief": cluster, "worker": {"chief": cluster["chief"], "ps": cluster["ps"], "worker": own},
                "ps": {"chief": cluster["chief"], "ps": own}}[task]
        assert config == {"cluster": view, "task": {"type": task, "index": int(index)}}
        assert json.loads(Path(seen[key]["env"]["VPIPE_CLUSTER_FILE"]).read_text()) == cluster
        record = seen[key]
        env = record["env"]
        assert record["argv"][:8] == [
            f"--job_name={task}", f"--task_index={index}",
            f"--ps_hosts={','.join(cluster['ps'])}", f"--worker_hosts={','.join(cluster['worker'])}",
            f"--data_dir={local.data_dir}", f"--log_dir={local.log_dir}",
            f"--shard_index={index if task == 'worker' else 0}", "--num_shards=2",
        ]
        # Volcano's env and svc plugins.
        assert env["VK_TASK_INDEX"] == env["VC_TASK_INDEX"] == index
        assert env["VC_WORKER_HOSTS"] == "127.0.0.1,127.0.0.1" and env["VC_WORKER_NUM"] == "2"
        assert env["VC_PS_NUM"] == "1" and env["VC_CHIEF_NUM"] == "1"
        assert env["HOSTNAME"] == f"envjob-{key}"
        # Volumes: the code emptyDir is the pod's own; data and log volumes are the backend's.
        assert record["cwd"] == env["VPIPE_CODE_DIR"] and record["cwd"].startswith(str(local.workdir))
        assert f"/envjob-{key}/" in record["cwd"]
        assert env["VPIPE_DATA_DIR"] == str(local.data_dir) and env["VPIPE_LOG_DIR"] == str(local.log_dir)
        # Nothing of the test process's environment leaks in.
        assert "PYTEST_CURRENT_TEST" not in env
    assert len({r["cwd"] for r in seen.values()}) == 4

    # The svc plugin's files, as Volcano writes them (no newline after the last host).
    svc_dir = next(local.workdir.glob("jobs/default/envjob-*/etc-volcano"))
    assert (svc_dir / "worker.host").read_text() == "127.0.0.1\n127.0.0.1"
    assert (svc_dir / "VC_PS_HOSTS").read_text() == "127.0.0.1"

    # Output: prefixed on the backend's stream, and per pod in files under the log directory.
    assert "worker-1 | worker 1: serve" in local.output.lines
    assert "chief-0 | all 4 started; done" in local.output.lines
    chief_log = Path(replica(local, "envjob", "envjob-chief-0")["log"])
    assert chief_log.is_relative_to(local.log_dir) and "all 4 started; done" in chief_log.read_text()
    assert out.session.log_tail("envjob-chief-0", 1) == "all 4 started; done"


def test_completion_task_ends_parameter_servers_and_linger_is_measured(local: Local, code_url: str) -> None:
    out = run_job(local, manifest(code_url, "done", ps=1, workers=2, args=("--worker=exit:0",)))
    assert out.job["status"]["state"]["phase"] == "Completed"
    assert out.phases[-2:] == ["Completing", "Completed"]
    ps = replica(local, "done", "done-ps-0")
    workers = [replica(local, "done", f"done-worker-{i}") for i in range(2)]
    # The parameter server never exits on its own: the workers' TaskCompleted -> CompleteJob stopped it.
    assert ps["stopped_by"] == "CompleteJob" and all(w["exit_code"] == 0 and w["stopped_by"] is None for w in workers)
    assert ps["finished_at"] > max(w["finished_at"] for w in workers)
    assert out.linger is not None and out.linger == pytest.approx(ps["finished_at"] - max(w["finished_at"] for w in workers))
    assert not alive(ps["pid"])
    # Volcano deletes the pods it stops and keeps finished ones.
    assert sorted((p["metadata"]["name"], p["status"]["phase"]) for p in out.pods) == [
        ("done-worker-0", "Succeeded"), ("done-worker-1", "Succeeded")]
    assert job_status(out.job).tasks["worker"].succeeded == 2


def test_without_a_completion_policy_the_parameter_server_hangs(local: Local, code_url: str) -> None:
    """The hang the CompleteJob policy exists for: workers done, PS still serving, job Running."""
    job = manifest(code_url, "hang", ps=1, workers=1, args=("--worker=exit:0",))
    for task in job["spec"]["tasks"]:
        task.pop("policies", None)

    def worker_done(seen: dict) -> bool:
        counts = seen["status"].get("taskStatusCount", {}).get("worker", {}).get("phase", {})
        return counts.get("Succeeded") == 1

    out = run_job(local, job, until=worker_done)
    ps = replica(local, "hang", "hang-ps-0")
    assert out.job["status"]["state"]["phase"] == "Running"
    assert alive(ps["pid"]) and ps["finished_at"] is None
    assert out.session.abort("test over") == "aborted"
    final = local.backend.get("default", "hang")
    assert final is not None and final["status"]["state"]["phase"] == "Aborted"
    assert replica(local, "hang", "hang-ps-0")["stopped_by"] == "AbortJob"
    assert not alive(ps["pid"]) and no_process_of(local, "hang")
    assert out.session.linger_seconds() is None


def test_failing_worker_restarts_the_job_up_to_max_retry_then_fails(local: Local, code_url: str) -> None:
    out = run_job(local, manifest(code_url, "flaky", ps=1, workers=1, max_retry=2, args=("--worker=exit:3",)))
    status = out.job["status"]
    assert status["state"]["phase"] == "Failed" and status["retryCount"] == 2
    assert "Restarting" in out.phases and out.phases.count("Running") == 2
    assert "restarted 1 time(s), maxRetry 2 reached" in status["state"]["message"]  # two runs: one restart
    # One failure per attempt, each a pod of its own, exit code 3.
    failures = [p for p in out.failed_pods if p["metadata"]["name"] == "flaky-worker-0"]
    assert len(failures) == 2 and len({p["metadata"]["uid"] for p in failures}) == 2
    failure = pod_failure(out.failed_pods)
    assert failure is not None and (failure.pod, failure.exit_code, failure.task) == ("flaky-worker-0", 3, "worker")
    assert out.session.log_tail("flaky-worker-0", 2) == "something went wrong\nexiting with 3"
    # Each restart stopped the parameter server and started everything again.
    assert [replica(local, "flaky", "flaky-ps-0", a)["stopped_by"] for a in (0, 1)] == ["RestartJob", "RestartJob"]
    assert no_process_of(local, "flaky")


def test_no_restart_on_failure_terminates_at_the_first_failed_pod(local: Local, code_url: str) -> None:
    out = run_job(local, manifest(code_url, "term", ps=1, workers=2, restart=False,
                                  args=("--worker=exit:5",)))
    status = out.job["status"]
    assert status["state"]["phase"] == "Terminated" and status["retryCount"] == 0
    assert pod_failure(out.failed_pods).exit_code == 5
    assert replica(local, "term", "term-ps-0")["stopped_by"] == "TerminateJob"


@pytest.mark.parametrize("broken", ["entry point", "code url"])
def test_gang_start_with_a_pod_that_cannot_start_starts_none(local: Local, code_url: str, broken: str) -> None:
    if broken == "entry point":
        # Only the chief's entry point is missing (the rendered manifest edited: the CLI
        # refuses VPIPE_* variables, the backend runs whatever manifest it gets).
        job = manifest(code_url, "gang", ps=1, workers=2, chief=True)
        chief = next(t for t in job["spec"]["tasks"] if t["name"] == "chief")["template"]["spec"]["containers"][0]
        next(e for e in chief["env"] if e["name"] == "VPIPE_ENTRY")["value"] = "missing.sh"
        expected = "pod gang-chief-0 cannot start: entry point 'missing.sh' not found"
    else:
        job = manifest(code_url + "nowhere/", "gang", ps=1, workers=2)
        expected = "cannot download"
    out = run_job(local, job)
    state = out.job["status"]["state"]
    assert state["phase"] == "Failed" and state["reason"] == "StartError"
    assert expected in state["message"] and "no pod was started" in state["message"]
    assert all(r["pid"] is None for r in local.backend.replicas("default", "gang"))
    assert not (local.log_dir / "records").exists()  # no entry point ever ran
    [failed] = out.failed_pods
    assert failed["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "StartError"
    assert out.job["status"]["retryCount"] == 0


def test_delete_stops_every_process_including_detached_children(local: Local, code_url: str) -> None:
    def all_started(seen: dict) -> bool:
        orphans = list((local.log_dir / "records").glob("orphan-*.pid"))
        return len(records(local)) == 3 and len(orphans) == 2 and seen["status"]["state"]["phase"] == "Running"

    out = run_job(local, manifest(code_url, "gone", ps=1, workers=2, args=("--worker=orphan",)), until=all_started)
    pids = [r["pid"] for r in local.backend.replicas("default", "gone")]
    orphans = [int(p.read_text()) for p in (local.log_dir / "records").glob("orphan-*.pid")]
    assert len(pids) == 3 and len(orphans) == 2 and all(alive(p) for p in pids + orphans)
    out.session.delete()
    assert local.backend.get("default", "gone") is None
    assert list(out.session.watch(lambda: 0.1)) == []  # the watch ends with the job
    assert not any(alive(p) for p in pids + orphans)


def test_same_run_id_attaches_and_a_taken_name_is_refused(local: Local, code_url: str) -> None:
    job = manifest(code_url, "attach", run_id="run-7")
    first, created = local.backend.submit(job)
    local.jobs.append(("default", "attach"))
    assert created
    again, created_again = local.backend.submit(manifest(code_url, "attach", run_id="run-7"))
    assert not created_again and again["metadata"]["uid"] == first["metadata"]["uid"]
    with pytest.raises(InputError) as err:
        local.backend.submit(manifest(code_url, "attach", run_id="run-8"))
    assert err.value.field == "job.name" and "belongs to run 'run-7'" in str(err.value)
    deadline = time.monotonic() + 120
    while local.backend.get("default", "attach")["status"]["state"]["phase"] != "Running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with local.backend.session(first, log_lines=5) as session:
        session.delete()
    assert no_process_of(local, "attach")


def test_abort_kills_what_ignores_sigterm_after_the_grace_period(tmp_path: Path, code_url: str) -> None:
    """SIGTERM first, SIGKILL once the grace period is over, as the kubelet stops a container."""
    backend = LocalBackend(tmp_path / "work", log_dir=tmp_path / "logs", output=None, grace_seconds=1)
    local = Local(backend, Output(), tmp_path / "work", tmp_path / "logs", tmp_path / "work" / "data")
    try:
        def running(seen: dict) -> bool:
            return len(records(local)) == 2 and seen["status"]["state"]["phase"] == "Running"

        out = run_job(local, manifest(code_url, "stubborn", ps=1, workers=1, args=("--ps=stubborn",)), until=running)
        out.session.abort("timed out")
        assert backend.get("default", "stubborn")["status"]["state"]["phase"] == "Aborted"
        ps, worker = replica(local, "stubborn", "stubborn-ps-0"), replica(local, "stubborn", "stubborn-worker-0")
        assert (ps["exit_code"], worker["exit_code"]) == (128 + 9, 128 + 15)  # SIGKILL / SIGTERM
        assert ps["finished_at"] - worker["finished_at"] >= 0.9  # the PS got its grace period
        assert no_process_of(local, "stubborn")
    finally:
        backend.close()


def test_code_path_on_this_machine_runs_in_place(local: Local, tmp_path: Path) -> None:
    """--code-path without a PVC is a directory "inside the image": here, on this machine."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "run.sh").write_text(RUN_SH)
    spec = TFJobSpec(job=JobOptions(name="inplace"), code=CodeSource(path=str(code)), args=("--worker=exit:0",))
    out = run_job(local, build_tf_job(spec))
    assert out.job["status"]["state"]["phase"] == "Completed"
    assert records(local)["worker-0"]["cwd"] == str(code)


@pytest.mark.parametrize(("ps_exit", "phase"), [(0, "Completed"), (1, "Failed")])
def test_without_policies_the_job_ends_when_every_pod_has_finished(local: Local, code_url: str, ps_exit: int,
                                                                   phase: str) -> None:
    """Volcano's running state: no policy fires, every pod finished; each task's minAvailable
    must have succeeded."""
    job = manifest(code_url, "plain", ps=1, workers=1, args=("--worker=exit:0", f"--ps=exit:{ps_exit}"))
    job["spec"]["policies"] = []
    for task in job["spec"]["tasks"]:
        task.pop("policies", None)
    out = run_job(local, job)
    assert out.job["status"]["state"]["phase"] == phase
    assert out.job["status"]["state"]["reason"] == "AllPodsFinished" and out.job["status"]["retryCount"] == 0
    assert sorted(p["status"]["phase"] for p in out.pods) == sorted(["Succeeded", "Succeeded" if ps_exit == 0 else "Failed"])
