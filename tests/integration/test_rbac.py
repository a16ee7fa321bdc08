"""The shipped RBAC (manifests/base) against what the steps really do. Every step's success
and failure paths run with a real token of the `vpipe-runner` ServiceAccount on the
RBAC-enforcing API server, with its audit log on; the test collects every (verb, group,
resource, subresource) the ServiceAccount was allowed or denied and asserts that nothing was
denied and that the Role grants nothing that was not used. No hand-written list of verbs:
the Role and the code must agree with each other through the API server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest
from kubernetes import client, watch

from tests.cluster import behaviour
from tests.helpers.rbac import SERVICE_ACCOUNT, audited, granted, installed, manifests, token_kubeconfig
from tests.integration.waiting import wait_for

pytestmark = pytest.mark.integration


def vpipe(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "volcano_pipelines", *argv], capture_output=True, text=True,
                          timeout=timeout)


class FailedPodReaper:
    """Deletes each of a job's pods the moment it is Failed: the step's end-of-run pod list then
    comes too late, so only its failed-pod watch can name the pod."""

    def __init__(self, cluster: Any, namespace: str, job: str) -> None:
        self.core = client.CoreV1Api(cluster.api_client())
        self.namespace, self.job = namespace, job
        self.deleted: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            stream = watch.Watch()
            for event in stream.stream(self.core.list_namespaced_pod, self.namespace, timeout_seconds=2,
                                       label_selector=f"volcano.sh/job-name={self.job}"):
                pod = event["object"]
                if event["type"] != "DELETED" and pod.status.phase == "Failed":
                    try:
                        self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
                        self.deleted.append(pod.metadata.name)
                    except client.ApiException as err:
                        if err.status != 404:
                            raise


def run_every_path(cluster: Any, namespace: str, kubeconfig: Path) -> dict[str, subprocess.CompletedProcess]:
    """Each step's success and failure paths as the ServiceAccount."""
    common = ["--kubeconfig", str(kubeconfig), "--json", "-q"]
    runs: dict[str, subprocess.CompletedProcess] = {}
    runs["success"] = vpipe("train", "tf", "--name", "ok", "--ps", "1", "--workers", "2", "--run-id", "ok-1", *common)
    runs["attach"] = vpipe("train", "tf", "--name", "ok", "--ps", "1", "--workers", "2", "--run-id", "ok-1", *common)
    runs["status"] = vpipe("status", "ok", "--kubeconfig", str(kubeconfig), "--json")
    # Fake nodes serve no logs, so nothing reports progress here: the step's progress
    # annotation (steps/_follow.py) is written as the ServiceAccount through the session a
    # waiting step uses, then read back by `vpipe status`.
    runs["annotate"] = subprocess.run([sys.executable, "-c", (
        "import sys; from volcano_pipelines.k8s.client import connect; "
        "from volcano_pipelines.backends.cluster import ClusterBackend; "
        "backend = ClusterBackend(connect(sys.argv[1])); job = backend.get(backend.cluster.namespace, 'ok'); "
        "session = backend.session(job, 0); "
        "session.annotate({'volcano-pipelines/progress': '{\"step\":5,\"total\":10}'}); "
        "print(session.missing())"), str(kubeconfig)], capture_output=True, text=True, timeout=60)
    runs["status-progress"] = vpipe("status", "ok", "--kubeconfig", str(kubeconfig), "--json")
    reaper = FailedPodReaper(cluster, namespace, "fails")
    try:
        runs["failure"] = vpipe("train", "tf", "--name", "fails", "--workers", "1", "--max-retry", "1",
                                "--run-id", "fails-1", "--pod-label", f"worker:{behaviour.FAIL_LABEL}=3", *common)
    finally:
        reaper.stop.set()
        reaper.thread.join(timeout=10)
    runs["reaped"] = subprocess.CompletedProcess([], 0, json.dumps(reaper.deleted), "")
    runs["status-failed"] = vpipe("status", "fails", "--kubeconfig", str(kubeconfig), "--json")
    # The exit handler of the failed run: its post-mortem (pods, events, logs) before it deletes
    # the job, and the run's TensorBoard looked up for the summary (it started none).
    runs["finish"] = subprocess.run([sys.executable, "-c", (
        "import json, sys; from volcano_pipelines.steps import Connection, finish_run; "
        "print(json.dumps(finish_run('fails-1', pipeline_state='FAILED', connection=Connection(sys.argv[1])).to_dict()))"),
        str(kubeconfig)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "VPIPE_POST_MORTEM_DIR": str(kubeconfig.parent / "post-mortem")})
    # A gang that never fits: pending hints (PodGroup, events), then the timeout aborts it.
    runs["timeout"] = vpipe("train", "tf", "--name", "stuck", "--gpus-per-worker", "64", "--timeout", "8", *common)
    runs["missing-queue"] = vpipe("train", "tf", "--name", "q", "--queue", "nope", *common)
    # Cancelled (SIGTERM, as a pipeline cancels a step): on_cancel=delete deletes the job.
    proc = subprocess.Popen([sys.executable, "-m", "volcano_pipelines", "train", "tf", "--name", "cancel",
                             "--pod-label", f"worker:{behaviour.KEEP_RUNNING_LABEL}=true", *common],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    api = client.CustomObjectsApi(cluster.api_client())
    wait_for("job cancel exists", lambda: any(
        j["metadata"]["name"] == "cancel"
        for j in api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs")["items"]),
        timeout=60)
    time.sleep(1)  # let the step reach its wait (signal handlers installed)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    runs["cancel"] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return runs


@pytest.fixture
def shipped(cluster: Any, namespace: str) -> Iterator[list[dict[str, Any]]]:
    with installed(cluster, namespace, manifests(namespace)) as objects:
        yield objects


def test_shipped_role_is_exactly_what_every_path_uses(cluster: Any, namespace: str, shipped: list[dict[str, Any]],
                                                       tmp_path: Path) -> None:
    plane = cluster.require_local()  # reads the API server's audit log
    kubeconfig = token_kubeconfig(cluster, namespace, SERVICE_ACCOUNT, tmp_path / "runner.kubeconfig")
    runs = run_every_path(cluster, namespace, kubeconfig)

    assert runs["success"].returncode == 0, runs["success"].stderr
    assert json.loads(runs["success"].stdout)["phase"] == "Completed"
    assert json.loads(runs["attach"].stdout)["created"] is False
    assert json.loads(runs["status"].stdout)["phase"] == "Completed"
    assert runs["annotate"].returncode == 0 and runs["annotate"].stdout.strip() == "[]", runs["annotate"]
    assert json.loads(runs["status-progress"].stdout)["progress"] == {"step": 5, "total": 10}

    failed = json.loads(runs["failure"].stdout)
    assert runs["failure"].returncode == 1, runs["failure"].stderr
    assert failed["phase"] == "Failed" and failed["missing"] == [], failed
    # Every failed pod was deleted before the end-of-run list: only the watch saw it.
    assert json.loads(runs["reaped"].stdout), "the reaper deleted no failed pod"
    assert failed["failure"]["exit_code"] == 3 and failed["failure"]["pod"].startswith("fails-worker-"), failed
    assert json.loads(runs["status-failed"].stdout)["phase"] == "Failed"
    finished = json.loads(runs["finish"].stdout)
    assert finished["cleanup"] == "deleted" and finished["tensorboard"] is None, finished
    assert "error" not in finished["post_mortem"], finished
    assert json.loads(Path(finished["post_mortem"]["json"]).read_text())["job"]["name"] == "fails"

    stuck = json.loads(runs["timeout"].stdout)
    assert runs["timeout"].returncode == 1 and stuck["message"].endswith("job aborted"), stuck  # the Command was allowed
    assert runs["missing-queue"].returncode == 2 and "default" in runs["missing-queue"].stderr  # queues listable
    assert runs["cancel"].returncode == 1 and "deleted" in runs["cancel"].stderr, runs["cancel"].stderr
    for name, run in runs.items():
        assert "permission" not in run.stderr.lower(), (name, run.stderr)

    user = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    wait_for("audit log flushed", lambda: ("delete", "batch.volcano.sh", "jobs", "") in audited(plane.audit_log, user),
             timeout=30)
    seen = audited(plane.audit_log, user)
    denied = sorted(access for access, decisions in seen.items() if "allow" not in decisions)
    used = {access for access, decisions in seen.items() if "allow" in decisions}
    assert denied == [], f"the ServiceAccount was refused: {denied}"
    unused = sorted(granted(shipped) - used)
    assert unused == [], f"the Role grants what no step used: {unused}"


def test_a_refused_watch_is_reported_not_hidden(cluster: Any, namespace: str, tmp_path: Path) -> None:
    """The Role without `watch` on pods (the bug this test guards): the step still ends, warns
    once naming the verb and resource, and its result says what it could not see."""
    objects = manifests(namespace)
    for obj in objects:
        for rule in obj.get("rules", []):
            if rule["resources"] == ["pods"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "watch"]
    with installed(cluster, namespace, objects):
        kubeconfig = token_kubeconfig(cluster, namespace, SERVICE_ACCOUNT, tmp_path / "runner.kubeconfig")
        run = vpipe("train", "tf", "--name", "nowatch", "--workers", "1", "--max-retry", "1",
                    "--pod-label", f"worker:{behaviour.FAIL_LABEL}=3", "--kubeconfig", str(kubeconfig), "--json")
        assert run.returncode == 1, run.stderr
        result = json.loads(run.stdout)
        assert any("watch pods denied" in note for note in result["missing"]), result
        assert run.stderr.count("permission to watch pods denied") == 1, run.stderr


def test_without_the_role_the_step_exits_3_and_says_so(cluster: Any, namespace: str, tmp_path: Path) -> None:
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    kubeconfig = token_kubeconfig(cluster, namespace, "nobody", tmp_path / "nobody.kubeconfig")
    proc = vpipe("train", "tf", "--name", "denied", "--kubeconfig", str(kubeconfig), "-q")
    assert proc.returncode == 3, proc.stderr
    assert "permission denied" in proc.stderr and "403" in proc.stderr
