"""What happened to every pod, on the real control plane (kube-apiserver + Volcano + kwok):
the post-mortem record of a failed job and of a 200-pod job (bounded in size, written in a
bounded time), and a job Volcano ends before any pod ran (issue 28, item 9).

kwok runs no container, so no log lines can be read here (the record says so in its notes);
tests/node/test_pod_story.py reads real logs on the real node."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import behaviour
from tests.helpers.evict import Evictor
from tests.helpers.rbac import installed, manifests, token_kubeconfig
from tests.helpers.vpipe import Run, VPIPE

pytestmark = pytest.mark.integration

CODE_URL = "https://example.com/code/"  # never fetched: kwok runs no container
MAX_BYTES = 1024 * 1024


def train(kubeconfig: Any, record_dir: Path, *args: str, timeout: float = 400) -> Run:
    env = {**os.environ, "VPIPE_POST_MORTEM_DIR": str(record_dir)}
    proc = subprocess.run([*VPIPE, "train", "tf", *args, "--code-url", CODE_URL, "--kubeconfig", str(kubeconfig),
                           "--json"], capture_output=True, text=True, timeout=timeout, env=env)
    try:
        result = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        result = None
    return Run(proc.returncode, result, proc.stdout, proc.stderr)


def saved(record_dir: Path, namespace: str, name: str) -> tuple[dict[str, Any], str, int]:
    path = record_dir / namespace / f"{name}.json"
    return json.loads(path.read_text()), (record_dir / namespace / f"{name}.md").read_text(), path.stat().st_size


def test_a_failing_worker_is_named_in_the_post_mortem_with_every_other_pod(cluster: Any, namespace: str,
                                                                             tmp_path: Path) -> None:
    run = train(cluster.kubeconfig, tmp_path, "--name", "pm", "-n", namespace, "--ps", "1", "--workers", "2",
                "--max-retry", "1", "--pod-label", f"worker:{behaviour.FAIL_LABEL}=3")
    assert run.returncode == 1, run.stderr
    assert run.result is not None and run.result["phase"] == "Failed"
    post = run.result["post_mortem"]
    assert post and "error" not in post, post
    record, text, size = saved(tmp_path, namespace, "pm")
    assert post["json"] == str(tmp_path / namespace / "pm.json") and size == record["bytes"] <= MAX_BYTES
    pods = {p["name"]: p for p in record["pods"]}
    assert {"pm-ps-0", "pm-worker-0", "pm-worker-1"} <= set(pods), sorted(pods)
    failed = [p for p in record["pods"] if p["failed"]]
    summary = [(p["name"], p["phase"], p["outcome"], p.get("end")) for p in record["pods"]]
    assert failed and all(p["task"] == "worker" and p["outcome"] == "exit code 3" for p in failed), summary
    assert failed[0]["containers"][0]["state"]["exit_code"] == 3
    assert pods["pm-ps-0"]["outcome"] in ("stopped by the job", "running"), pods["pm-ps-0"]
    assert record["job"]["phase"] == "Failed" and record["job"]["max_retry"] == 1
    assert any(e["object"] == "Job/pm" for e in record["events"]), record["events"]
    assert f"| {failed[0]['name']} | worker |" in text and "exit code 3" in text
    # The step's message names the pod, its task and its exit code; no "Error" for the PS.
    assert "(task worker)" in run.result["message"] and "exit code 3" in run.result["message"], run.result["message"]
    assert "exit code 137" not in run.stderr and "exit code 143" not in run.stderr, run.stderr


@pytest.mark.parametrize("pods", [2, 20, 200])
def test_a_200_pod_record_is_bounded_and_written_in_bounded_time(cluster: Any, namespace: str, tmp_path: Path,
                                                                  pods: int) -> None:
    """Also the measurement of the record's size and time for 2, 20 and 200 pods (printed)."""
    started = time.monotonic()
    run = train(cluster.kubeconfig, tmp_path, "--name", "big", "-n", namespace, "--ps", "1", "--workers", str(pods - 1),
                "--worker-cpu", "50m", "--worker-memory", "32Mi", "--ps-cpu", "50m", "--ps-memory", "32Mi",
                "--pod-label", "worker:" + "=".join(next(iter(behaviour.run_for(2).items()))), timeout=600)
    elapsed = time.monotonic() - started
    assert run.returncode == 0, run.stderr[-3000:]
    post = run.result["post_mortem"] if run.result else None
    assert post and "error" not in post, post
    record, text, size = saved(tmp_path, namespace, "big")
    assert size == record["bytes"] <= MAX_BYTES
    assert len(record["pods"]) == pods and post["pods"] == pods
    assert sum(1 for p in record["pods"] if p["outcome"] == "succeeded") == pods - 1
    # Bounded: a fixed number of reads (job, pod list, event pages, logs of at most 5 pods per
    # task), whatever the pod count; generous for a loaded 2-core machine.
    assert post["seconds"] < 60, post
    print(f"\n{pods} pods: post-mortem {size} bytes in {post['seconds']:.2f}s; step {elapsed:.0f}s")
    if pods > 50:  # a large job's Markdown groups its pods (every pod counted) instead of a row each
        assert f"{pods} pods by task and what happened (every pod is in the JSON record)" in text, text
        assert f"| worker | Succeeded | succeeded | {pods - 1} | 0-{pods - 2} |" in text, text
        assert "| big-worker-" not in text, text


def test_a_job_in_a_missing_unreadable_queue_says_why_it_ended(cluster: Any, namespace: str, tmp_path: Path) -> None:
    """Without the queue-reader grant the step cannot check the queue at submit time: it warns
    naming the grant, and when Volcano ends the job (no pod ever ran) the message says why.
    With the grant the same job is refused before anything is created
    (tests/integration/test_job_admission.py). Volcano ends such a job once its controller
    gives up retrying the sync: 20 s under the test control plane's `--max-requeue-num=12`
    (tests/cluster/launcher.py), 164 s with Volcano's default 15."""
    without_queue_grant = [obj for obj in manifests(namespace) if "queue" not in obj["metadata"]["name"]]
    with installed(cluster, namespace, without_queue_grant):
        kubeconfig = token_kubeconfig(cluster, namespace, "vpipe-runner", tmp_path / "runner.kubeconfig")
        run = train(kubeconfig, tmp_path, "--name", "noq", "--workers", "1", "--queue", "no-such-queue",
                    "--timeout", "400", timeout=500)
    assert "vpipe-queue-reader" in run.stderr and "manifests/cluster" in run.stderr, run.stderr
    assert run.returncode == 1, run.stderr[-3000:]
    assert run.result is not None, run.stderr[-3000:]
    message = run.result["message"] or ""
    assert "no-such-queue" in message and "no pod ever ran" in message, message
    print(f"\nmissing queue: {message}")


# --- riding through evictions on the control plane (kwok: the Eviction API, Volcano's PodEvicted
# policy and restart are real; the containers are not: tests/node/test_pod_story.py runs them)

def _worker_runs(seconds: int) -> str:
    return "worker:" + "=".join(next(iter(behaviour.run_for(seconds).items())))


@pytest.mark.parametrize("grace", [None, 0], ids=["default-grace", "grace-0"])
def test_an_evicted_worker_restarts_the_job_and_the_step_names_the_cause(cluster: Any, namespace: str,
                                                                          tmp_path: Path, grace: int | None) -> None:
    evictor = Evictor(cluster, namespace, "ev-worker-0", grace=grace, after=2.0)
    try:
        run = train(cluster.kubeconfig, tmp_path, "--name", "ev", "-n", namespace, "--ps", "1", "--workers", "1",
                    "--max-retry", "3", "--pod-label", _worker_runs(10))
    finally:
        evictor.stop()
    assert evictor.evicted, "the worker was never evicted"
    assert run.returncode == 0, run.stderr[-3000:]
    result = run.result
    assert result is not None and result["phase"] == "Completed" and result["retries"] == 1, result
    [restart] = result["restarts"]
    assert (restart["pod"], restart["task"], restart["cause"]) == ("ev-worker-0", "worker", "evicted"), restart
    assert restart["reason"] == "EvictionByEvictionAPI"
    assert "restart 1: pod ev-worker-0 (task worker) evicted" in run.stderr, run.stderr[-3000:]
    assert result["restart_causes"] == "1: evicted pod ev-worker-0"
    record, _, _ = saved(tmp_path, namespace, "ev")
    assert record["restarts"][0]["cause"] == "evicted"


def test_a_job_evicted_more_often_than_max_retry_ends_failed_saying_so(cluster: Any, namespace: str,
                                                                        tmp_path: Path) -> None:
    evictor = Evictor(cluster, namespace, "often-worker-0", grace=0, times=2, after=2.0)
    try:
        run = train(cluster.kubeconfig, tmp_path, "--name", "often", "-n", namespace, "--ps", "1", "--workers", "1",
                    "--max-retry", "2", "--pod-label", _worker_runs(30))
    finally:
        evictor.stop()
    assert run.returncode == 1, run.stderr[-3000:]
    result = run.result
    assert result is not None and result["phase"] == "Failed", result
    assert "restarted 1 time(s), max_retry 2 reached: last cause pod often-worker-0 (task worker) evicted" \
        in (result["message"] or ""), result["message"]
    assert [r["cause"] for r in result["restarts"]] == ["evicted"]
