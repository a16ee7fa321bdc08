"""Training that survives an eviction under the shipped `vpipe-train-tf` WorkflowTemplate
(issue 29), Argo v4.0.5's real controller, the train step in its pod, every pod on the real
node: a TF2 parameter-server job (the examples/tf-ps code, data and checkpoints on
GlusterFS-backed PVCs) trains; once the step has written a checkpoint past step 0 onto the
Job (`volcano-pipelines/last-checkpoint`, what a scheduler or operator reads), a worker is
evicted through the Eviction API with the default grace period. The job restarts and
resumes from a checkpoint, the one step pod rides through the restart (Argo retries nothing),
the Workflow Succeeds, and the step's output parameters say it: `retries` 1 (2 let through,
named, see below), `restart-causes` naming the evicted worker first, `resumed-from-step` past 0.

A worker, because TF2's ParameterServerStrategy itself would tolerate losing one (the
coordinator reschedules its steps on the others): the job's policy still restarts the gang
for any evicted pod (docs/lifecycle.md), and that is what is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.argo_pipelines import storage
from tests.helpers.evict import evict
from tests.helpers.training import EXAMPLES, toleration
from tests.helpers.workflows import _why, jobs, submit_from_template, wait_finished
from tests.integration.waiting import wait_for
from volcano_pipelines.images import TF_TRAINER_IMAGE
from volcano_pipelines.volcano.report_lines import CHECKPOINT_ANNOTATION

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers, pytest.mark.gluster,
              pytest.mark.timeout(900)]


@pytest.fixture
def shipped(cluster: Any, namespace: str, argo: Any, node: Any) -> Iterator[tuple[Any, list[str]]]:
    """manifests/base + manifests/argo and the train-tf WorkflowTemplate in the namespace."""
    api = cluster.api_client()
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    support.apply_objects(api, namespace, support.load("pipelines/argo/train-tf.yaml"))
    pvs: list[str] = []
    try:
        yield api, pvs
    finally:
        for pv in pvs:
            client.CoreV1Api(api).delete_persistent_volume(pv)
        support.delete_cluster_scoped(api, objects)


def checkpoint_written(api: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """The job's last-checkpoint annotation once it names a step past 0 (None before)."""
    job = jobs(api, namespace).get(name) or {}
    text = ((job.get("metadata") or {}).get("annotations") or {}).get(CHECKPOINT_ANNOTATION)
    value = json.loads(text) if text else None
    return value if value and value.get("step", 0) > 0 else None


def test_a_worker_evicted_mid_training_restarts_the_job_and_the_workflow_succeeds_saying_so(
        cluster: Any, namespace: str, node: Any, code_url: str, gluster: Any, shipped: Any) -> None:
    api, pvs = shipped
    volumes = storage(api, pvs, namespace, gluster, node, "rsa")
    subprocess.run([sys.executable, str(EXAMPLES / "data" / "make_dataset.py"), str(volumes.data_dir), "--shards",
                    "2"], check=True, capture_output=True)
    steps, name = 4000, "rsa"  # as tests/node/test_resume.py has it: the eviction comes well before the end
    small = {f"{task}-{what}": value for task in ("ps", "worker", "chief")
             for what, value in (("cpu", "250m"), ("memory", "1536Mi"))}
    wf = submit_from_template(api, namespace, node, "vpipe-train-tf", "rsa-", {
        "name": name, "timeout": "800", "image": TF_TRAINER_IMAGE, "code-url": f"{code_url}/tf-ps/",
        "ps": "1", "workers": "2", "chief": "true", "data-pvc": volumes.data_pvc, "log-pvc": volumes.log_pvc,
        "args": "\n".join(["--api=tf2", f"--steps={steps}", "--threads=1", "--log_every=50",
                           "--checkpoint_every=500", f"--model_name={name}"]),
        "env": "TF_CPP_MIN_LOG_LEVEL=2", "queue": "default", "max-retry": "3", "progress-interval": "2",
        "node-selector": f"{node.label}={node.label_value}", "tolerations": toleration(node), **small,
    })
    # What the step in its pod wrote on the job, not a fixed sleep, says when to evict.
    checkpoint = wait_for("a checkpoint past step 0 on the job", lambda: checkpoint_written(api, namespace, name),
                          timeout=400, interval=0.5)
    evict(client.CoreV1Api(api), namespace, f"{name}-worker-0", None)
    finished = wait_finished(api, namespace, wf, timeout=600)

    assert finished["status"]["phase"] == "Succeeded", _why(finished)
    pods = [n for n in finished["status"]["nodes"].values() if n.get("type") == "Pod"]
    assert [n["phase"] for n in pods] == ["Succeeded"], [(n["displayName"], n["phase"]) for n in pods]  # no retry
    outputs = {p["name"]: p.get("value", "") for p in pods[0]["outputs"]["parameters"]}
    assert outputs["phase"] == "Completed" and outputs["succeeded"] == "true", outputs
    result = json.loads(outputs["result"])
    # One restart for the eviction; at most one more is let through, named, as in
    # tests/node/test_resume.py: CI saw the resumed chief exit 1 about a minute into the new
    # run on the loaded machine while the kubelet could not yet post the new pods' status ("no
    # relationship found between node and this object"). Its cause and the post-mortem (which
    # keeps the failed pod's last log lines) are then shown as a warning.
    assert outputs["retries"] in ("1", "2"), (outputs["restart-causes"], outputs)
    assert outputs["restart-causes"].split("; ")[0] == f"1: evicted pod {name}-worker-0", outputs
    if outputs["retries"] == "2":
        warnings.warn(f"{name}: a second restart after the eviction: {outputs['restart-causes']}\n"
                      f"{(result.get('post_mortem') or {}).get('summary')}", stacklevel=1)
    assert int(outputs["resumed-from-step"]) >= checkpoint["step"] > 0, (outputs, checkpoint)
    assert result["progress"]["step"] == steps and result["restarts"][0]["task"] == "worker", result
    assert json.loads((volumes.log_dir / "metrics.json").read_text())["global_step"] == steps
    print(f"\nArgo: {name}-worker-0 evicted after the checkpoint at step {checkpoint['step']}; the workflow "
          f"Succeeded, outputs retries={outputs['retries']} restart-causes={outputs['restart-causes']!r} "
          f"resumed-from-step={outputs['resumed-from-step']}; job {outputs['duration-seconds']} s")
