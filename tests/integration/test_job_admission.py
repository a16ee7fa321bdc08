"""Rendered jobs against the real thing: Volcano's CRD schema on the real API server
(server-side dry run), Volcano's own admission webhook code, the queue rule, and the watch's
410 recovery."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.needs import unavailable
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Resources, Role, Storage, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

pytestmark = pytest.mark.integration

TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
FULL_ROLE = Role(replicas=2, image="img:2", resources=Resources(cpu="1500m", memory="3Gi", gpu=1), env={"A": "$(x) 'q'"},
                 node_selector={"accel": "t4"}, tolerations=(TOLERATION,), labels={"team": "ml"}, annotations={"n": "v"})
FULL_JOB = JobOptions(name="full", queue="default", priority_class="high", min_available=5, max_retry=1,
                      ttl=0, image_pull_secrets=("regcred",), service_account="trainer",
                      run_id="run-1", labels={"example.com/team": "ml"}, restart_on_failure=False)


def shapes() -> dict[str, dict[str, Any]]:
    return {
        "tf-quickstart": build_tf_job(TFJobSpec(job=JobOptions(name="mnist"), worker=Role(replicas=10),
                                                code=CodeSource(url="http://files.example/mnist/"))),
        "tf-everything": build_tf_job(TFJobSpec(
            job=FULL_JOB, ps=FULL_ROLE, worker=FULL_ROLE, chief=Role(), evaluator=Role(),
            code=CodeSource(path="/code", pvc="code", entry="train.py"),
            storage=Storage(data_pvc="data", data_dir="/mnt/d", log_pvc="logs", log_dir="/mnt/l"),
            args=("--lr=0.1", "$(rm -rf /)"), port=5000)),
        "tf-archive": build_tf_job(TFJobSpec(job=JobOptions(name="arch"),
                                             code=CodeSource(url="https://h/c.tgz", sha256="a" * 64))),
        "mpi-default": build_mpi_job(MPIJobSpec(job=JobOptions(name="hello"), command=("mpi_hello",))),
        "mpi-everything": build_mpi_job(MPIJobSpec(
            job=replace(FULL_JOB, min_available=2), command=("python3", "x.py"), worker=FULL_ROLE, slots_per_worker=4, mpiexec_args=("-x", "A"),
            storage=Storage(data_pvc="data", log_pvc="logs"), code=CodeSource(url="http://f/code/"))),
    }


@pytest.mark.parametrize("shape", sorted(shapes()))
def test_crd_schema_accepts_rendered_job(cluster: Any, namespace: str, shape: str) -> None:
    job = shapes()[shape]
    job["metadata"]["namespace"] = namespace
    api = client.CustomObjectsApi(cluster.api_client())
    accepted = api.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job, dry_run="All")
    # Nothing the schema prunes: what we send is what would be stored.
    assert accepted["spec"]["tasks"] == job["spec"]["tasks"]
    for key in ("schedulerName", "minAvailable", "queue", "maxRetry", "plugins", "policies"):
        assert accepted["spec"][key] == job["spec"][key]
    assert api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs")["items"] == []


def test_missing_queue_is_bad_input_and_creates_nothing(cluster: Any, namespace: str) -> None:
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "volcano_pipelines", "train", "tf", "--name", "q", "-n", namespace, "--queue", "no-such-queue",
         "--kubeconfig", str(cluster.kubeconfig), "-q"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--queue='no-such-queue'" in proc.stderr and "default" in proc.stderr
    api = client.CustomObjectsApi(cluster.api_client())
    assert api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs")["items"] == []


def test_watch_resumes_after_410_gone(cluster: Any, namespace: str, caplog: pytest.LogCaptureFixture) -> None:
    """A resourceVersion the API server no longer serves (as after a long disconnect) gets a
    real `410 Gone`; the watch re-reads the job and carries on instead of failing."""
    from volcano_pipelines.k8s.client import connect
    from volcano_pipelines.k8s.volcano import watch_job

    job = build_tf_job(TFJobSpec(job=JobOptions(name="gone", namespace=namespace)))
    api = client.CustomObjectsApi(cluster.api_client())
    created = api.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", job)
    caplog.set_level("INFO", logger="volcano_pipelines.k8s.watch")
    updates = watch_job(connect(str(cluster.kubeconfig)), namespace, "gone", lambda: 2, resource_version="1")
    first = next(u for u in updates if u is not None)
    assert first["metadata"]["uid"] == created["metadata"]["uid"]
    assert int(first["metadata"]["resourceVersion"]) >= int(created["metadata"]["resourceVersion"])
    updates.close()
    assert "410 Gone" in caplog.text  # the expired path was really taken


@pytest.fixture(scope="module")
def webhook_check() -> Path:
    """Volcano's own job admission webhooks (mutating + validating), built from the pinned
    Volcano module and run in process by tests/cluster/go/volcano/webhookcheck."""
    from tests.cluster import build

    if not build.go_available():
        unavailable("needs Go to build Volcano's webhook code (tests/cluster)")
    return build.build() / "vc-webhook-check"


def admit(webhook_check: Path, jobs: list[dict[str, Any]], queues: tuple[str, ...] = ("default",)) -> list[dict[str, Any]]:
    proc = subprocess.run([str(webhook_check), *queues], input="".join(json.dumps(j) + "\n" for j in jobs),
                          capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def patched(obj: Any, patch: list[dict[str, Any]] | None) -> Any:
    """Apply the webhook's JSON patch (it only emits add / replace)."""
    result = json.loads(json.dumps(obj))
    for op in patch or []:
        assert op["op"] in ("add", "replace"), op
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = result
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if isinstance(target, list):
            target[int(last)] = op["value"]
        else:
            target[last] = op["value"]
    return result


@pytest.mark.parametrize("shape", sorted(shapes()))
def test_volcano_webhook_admits_and_has_nothing_to_default(webhook_check: Path, shape: str) -> None:
    """Clusters without Volcano's webhook get the same job: it would change nothing."""
    job = shapes()[shape]
    (verdict,) = admit(webhook_check, [job])
    assert verdict["allowed"], verdict["message"]
    assert patched(job, verdict["patch"]) == job


def test_volcano_webhook_rejects_what_validation_rejects(webhook_check: Path) -> None:
    """The checker really applies Volcano's rules: the jobs our validation refuses, hand-made
    past it, are refused by the webhook too."""
    too_many = shapes()["tf-quickstart"]
    too_many["spec"]["tasks"][1]["minAvailable"] = 99
    bad_policy = shapes()["tf-quickstart"]
    bad_policy["spec"]["policies"].append({"event": "NoSuchEvent", "action": "RestartJob"})
    verdicts = admit(webhook_check, [too_many, bad_policy, shapes()["tf-quickstart"]], queues=("other",))
    assert not verdicts[0]["allowed"] and "'minAvailable' is greater than 'replicas'" in verdicts[0]["message"]
    assert not verdicts[1]["allowed"] and "NoSuchEvent" in verdicts[1]["message"]
    assert not verdicts[2]["allowed"] and "queue" in verdicts[2]["message"]  # only queue "other" exists
