"""Live training progress on the real node: the train step follows the reports the examples
print (docs/progress.md) through the pod log API while a TF2 parameter-server job and an MPI
job train, keeps the Job's annotations current while they run, and returns the final figures
(which the KFP Metrics are made from). Uses the fixtures of test_training.py (images, code
server, PVCs on GlusterFS filled from HDFS)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.node import test_training as training
from tests.node.test_training import QUIET_TF, Volumes, placement
from volcano_pipelines.images import MPI_TRAINER_IMAGE, TF_TRAINER_IMAGE
from volcano_pipelines.kfp.summary import train_metrics
from volcano_pipelines.progress import Progress
from volcano_pipelines.steps import train_mpi, train_tf
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.volcano.report_lines import PROGRESS_ANNOTATION, TrainingProgress
from volcano_pipelines.volcano.status import JobStatus

# test_training.py's module fixtures, shared (images imported once per module).
node, code_url, volumes = training.node, training.code_url, training.volumes

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers,
              pytest.mark.hdfs, pytest.mark.gluster]


class Recorder(Progress):
    def __init__(self) -> None:
        self.states: list[TrainingProgress] = []

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        pass

    def training(self, name: str, state: TrainingProgress) -> None:
        self.states.append(state)


class AnnotationWatch:
    """Every distinct progress annotation the job carries while the step waits, read by
    another client (as `kubectl get` or a dashboard would)."""

    def __init__(self, cluster: Any, namespace: str, name: str) -> None:
        from kubernetes import client

        self.api = client.CustomObjectsApi(cluster.api_client())
        self.namespace, self.name = namespace, name
        self.values: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        from kubernetes import client

        while not self.stop.wait(1.0):
            try:
                job = self.api.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.namespace, "jobs",
                                                            self.name)
            except client.ApiException:
                continue
            text = (job["metadata"].get("annotations") or {}).get(PROGRESS_ANNOTATION)
            phase = ((job.get("status") or {}).get("state") or {}).get("phase")
            if text and phase == "Running" and (not self.values or self.values[-1] != json.loads(text)):
                self.values.append(json.loads(text))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def check(result: TrainResult, progress: Recorder, annotations: AnnotationWatch, steps: int) -> None:
    assert result.succeeded and result.phase == "Completed", result.to_dict()
    seen = [s.step for s in progress.states if s.step is not None]
    assert len(seen) >= 2 and seen == sorted(seen) and seen[-1] == steps, seen
    assert any(s.eta_seconds is not None for s in progress.states), progress.states
    # The annotation changed while the job ran, and its steps only went forward.
    running = [value["step"] for value in annotations.values]
    assert len(running) >= 2 and running == sorted(running), annotations.values
    assert result.progress is not None and result.progress["step"] == steps and result.progress["total"] == steps
    assert result.last_checkpoint is not None and result.last_checkpoint["step"] == steps
    metrics = train_metrics(result.to_dict())
    assert metrics["final_step"] == steps and metrics["total_steps"] == steps and "final_loss" in metrics
    print(f"\nreal node: {result.name}: {len(progress.states)} progress updates, {len(running)} distinct annotations "
          f"seen while running; final {result.progress}")


def test_tf2_ps_job_reports_progress_that_the_step_reads(cluster: Any, namespace: str, node: Any, code_url: str,
                                                         volumes: Volumes) -> None:
    # About 40 s of training at full speed (150 steps/s here, idle): the annotation, patched at
    # most every 10 s with a 2 s interval, changes several times while the job runs.
    steps = 6000
    progress = Recorder()
    annotations = AnnotationWatch(cluster, namespace, "prog2")
    try:
        result = train_tf(
            "prog2", kubeconfig=str(cluster.kubeconfig), namespace=namespace, image=TF_TRAINER_IMAGE,
            ps=1, workers=2, chief=True, code_url=f"{code_url}/tf-ps/", data_pvc=volumes.data_pvc,
            log_pvc=volumes.log_pvc, args=["--api=tf2", f"--steps={steps}", "--threads=1", "--log_every=50",
                                           "--checkpoint_every=500"],
            env={"": QUIET_TF}, timeout=900, progress_interval=2, progress=progress, **placement(node),
        )
    finally:
        annotations.close()
    check(result, progress, annotations, steps)


def test_mpi_job_reports_progress_that_the_step_reads(cluster: Any, namespace: str, node: Any, code_url: str,
                                                      volumes: Volumes) -> None:
    steps = 40000
    progress = Recorder()
    annotations = AnnotationWatch(cluster, namespace, "progm")
    try:
        result = train_mpi(
            "progm", kubeconfig=str(cluster.kubeconfig), namespace=namespace, image=MPI_TRAINER_IMAGE,
            workers=2, code_url=f"{code_url}/mpi/", data_pvc=volumes.data_pvc, log_pvc=volumes.log_pvc,
            command=["python3", "train.py", f"--steps={steps}", "--log_every=500", "--checkpoint_every=5000"],
            timeout=900, progress_interval=2, progress=progress, **placement(node),
        )
    finally:
        annotations.close()
    check(result, progress, annotations, steps)
