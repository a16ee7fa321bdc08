"""A hung task on the real node (issue 41, docs/progress.md "Hung tasks"): one worker's
container frozen with SIGSTOP from the host (its pod stays Running, as a hung or frozen
container's does) while the job trains; the train step names it within --stall-timeout and,
with --on-stall fail, aborts the job and says why. Real containers, real TensorFlow, the
examples' heartbeat over the pod network. And a frozen chief (the TF2 coordinator), which the
step finds by its own progress stopping, with --on-stall restart: the job restarts and resumes
from its checkpoint. Uses the training fixtures of tests/node/fixtures.py."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.training import QUIET_TF, Volumes, placement
from volcano_pipelines.images import TF_TRAINER_IMAGE
from volcano_pipelines.steps import Connection, train_tf

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers,
              pytest.mark.hdfs, pytest.mark.gluster]

STALL_TIMEOUT = 20
# The restart test's own: its second attempt must train to the end with no stall of its own,
# and on CI's loaded two cores (load 17, four test runs side by side) the restarted TF2 job once
# went 22 s between two progress reports, which was a second restart for a stall at 20 s. The
# frozen chief is still named and restarted for; the margin is for the machine's load.
RESTART_STALL_TIMEOUT = 45


def pod_processes(pod: str) -> list[int]:
    """The host's processes of a pod's app container: the kubelet sets HOSTNAME to the pod's
    name in its environment (the pause container has none)."""
    marker = f"HOSTNAME={pod}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
    return found


class Freezer:
    """Freezes `pod` once `reporter` has logged a progress step past `step`; thaws it at close
    (so that the kubelet's SIGTERM reaches it when the job is torn down)."""

    def __init__(self, cluster: Any, namespace: str, pod: str, reporter: str, step: int) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(cluster.api_client())
        self.namespace, self.pod, self.reporter, self.step = namespace, pod, reporter, step
        self.frozen: list[int] = []
        self.at: float | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def reported(self) -> int:
        from kubernetes import client

        try:
            text = self.core.read_namespaced_pod_log(self.reporter, self.namespace, container="tensorflow", tail_lines=40)
        except client.ApiException:
            return -1
        return max((int(s) for s in re.findall(r"vpipe:progress step=(\d+)", text)), default=-1)

    def run(self) -> None:
        deadline = time.monotonic() + 420
        while not self.done.wait(1.0) and time.monotonic() < deadline:
            if self.reported() >= self.step:
                pids = pod_processes(self.pod)
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                self.frozen, self.at = pids, time.monotonic()
                return

    def close(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)
        for pid in self.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_frozen_worker_container_is_named_and_on_stall_fail_aborts_the_job(
        cluster: Any, namespace: str, node: Any, code_url: str, volumes: Volumes) -> None:
    # TF1 between-graph: worker 0 (the chief) trains on while worker 1 is frozen, so only
    # worker 1 goes silent; without the stall it would train for hours.
    freezer = Freezer(cluster, namespace, "hung-worker-1", "hung-worker-0", 100)
    try:
        result = train_tf(
            "hung", connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=TF_TRAINER_IMAGE,
            ps=1, workers=2, code_url=f"{code_url}/tf-ps/", data_pvc=volumes.data_pvc, log_pvc=volumes.log_pvc,
            args=["--api=tf1", "--steps=1000000", "--threads=1", "--log_every=20", "--checkpoint_every=1000"],
            env={"": QUIET_TF}, timeout=600, progress_interval=2, stall_timeout=STALL_TIMEOUT, on_stall="fail",
            **placement(node),
        )
        ended = time.monotonic()
    finally:
        freezer.close()
    assert freezer.frozen and freezer.at is not None, f"worker 1 was never frozen: {result.to_dict()}"
    assert not result.succeeded and result.phase == "Aborted", result.to_dict()
    assert result.message is not None and result.message.startswith("stalled: worker[1] (no heartbeat) for "), result
    assert result.stalled is not None and result.stalled["tasks"] == "worker[1]", result.stalled
    # Named after the timeout, never before it, and within a couple of minutes of the freeze.
    took = ended - freezer.at
    assert STALL_TIMEOUT - 3 <= took <= STALL_TIMEOUT + 120, took
    print(f"\nreal node: worker 1 frozen ({len(freezer.frozen)} processes); the step aborted the job "
          f"{took:.0f} s later: {result.message}")


def test_a_frozen_chief_is_named_and_on_stall_restart_resumes_the_job_from_its_checkpoint(
        cluster: Any, namespace: str, node: Any, code_url: str, volumes: Volumes) -> None:
    # TF2: the chief is the coordinator; frozen, nothing trains and its own progress stops,
    # which the step reads itself (the heartbeat it would print is frozen with it).
    freezer = Freezer(cluster, namespace, "hungc-chief-0", "hungc-chief-0", 300)
    try:
        result = train_tf(
            "hungc", connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=TF_TRAINER_IMAGE,
            ps=1, workers=2, chief=True, code_url=f"{code_url}/tf-ps/", data_pvc=volumes.data_pvc,
            log_pvc=volumes.log_pvc, args=["--api=tf2", "--steps=1200", "--threads=1", "--log_every=50",
                                           "--checkpoint_every=200", "--max_steps_per_second=40"],
            env={"": QUIET_TF}, timeout=600, progress_interval=2, stall_timeout=RESTART_STALL_TIMEOUT,
            on_stall="restart", max_retry=3, **placement(node),
        )
    finally:
        freezer.close()
    assert freezer.frozen, f"the chief was never frozen: {result.to_dict()}"
    assert result.succeeded and result.phase == "Completed", result.to_dict()
    # One restart, for the stall, counted like any other; the new chief went on from a checkpoint.
    assert result.retries == 1 and len(result.restarts) == 1, result.restarts
    assert result.restarts[0].get("cause") == "stalled" and "chief[0]" in str(result.restarts[0]), result.restarts
    assert result.stalled is not None and result.stalled["tasks"] == "chief[0]" and result.stalled["action"] == "restart"
    assert result.resumed_from_step is not None and result.resumed_from_step >= 200, result.to_dict()
    print(f"\nreal node: the chief frozen at step >= 300; restarted for the stall, resumed from step "
          f"{result.resumed_from_step}, Completed; restarts: {result.restart_causes}")
