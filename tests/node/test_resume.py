"""Training that survives an eviction, end to end on the real node (issue 29): a TF2
parameter-server job and an MPI job train for real (the examples, the trainer images, data
and checkpoints on GlusterFS-backed PVCs); once the step has read a progress report past
step 0 and a checkpoint, a training pod is evicted through the Eviction API, with the
default grace period (30 s: the training code checkpoints and exits on SIGTERM) and with
none (SIGKILL: the last periodic checkpoint is what is left). Each time the job restarts
(`PodEvicted -> RestartJob`), the new pods resume from a checkpoint past step 0, the job
completes, and the step's result says the restart, the evicted pod as its cause and the step
training resumed from; the model is exported at the total step count (one continuous run).

Which pods: the TF2 chief with the grace period (the one process with something to save on
SIGTERM) and the parameter server with none (the variables' holder: the case the issue saw
by hand); MPI's master with the grace period (mpiexec passes SIGTERM on to every rank, which
stop at one step and checkpoint) and a worker with none (its ranks die with the pod's sshd).
No framework here rides through the loss without a restart: the job-level policy restarts
the gang for any evicted pod (docs/lifecycle.md), a TF2 worker included, because the step
cannot tell which strategy the code uses.

The last test restarts the real kubelet (stop, start with the same state) while a TF2 job
trains: the job completes, restarted or not, and the step never hangs.

The eviction is set off by what the step itself read (its Progress callback), never by a
fixed sleep. Uses the training fixtures of tests/node/fixtures.py (images, code server, PVCs)."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.evict import evict
from tests.helpers.training import QUIET_TF, Volumes, placement
from volcano_pipelines.images import MPI_TRAINER_IMAGE, TF_TRAINER_IMAGE
from volcano_pipelines.progress import Progress
from volcano_pipelines.steps import Connection, train_mpi, train_tf
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.volcano.report_lines import TrainingProgress
from volcano_pipelines.volcano.status import JobStatus

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers,
              pytest.mark.hdfs, pytest.mark.gluster, pytest.mark.timeout(900)]


class AtCheckpoint(Progress):
    """Does `act` once, the first time the step reads a progress report past step 0 with a
    checkpoint written: mid-training, with something to resume from."""

    def __init__(self, act: Callable[[], None]) -> None:
        self.act = act
        self.states: list[TrainingProgress] = []
        self.acted_at: TrainingProgress | None = None  # what the step had read when it acted
        self.error: str | None = None

    def job(self, name: str, status: JobStatus, problem: str | None) -> None:
        pass

    def training(self, name: str, state: TrainingProgress) -> None:
        self.states.append(state)
        if self.acted_at is None and self.error is None and (state.step or 0) > 0 and state.checkpoint_step:
            try:
                self.act()
                self.acted_at = state
            except Exception as err:  # noqa: BLE001 - asserted by the test, never raised into the step
                self.error = str(err)


class EvictAtCheckpoint(AtCheckpoint):
    """Evicts `pod` through the Eviction API at the first checkpoint."""

    def __init__(self, cluster: Any, namespace: str, pod: str, grace: int | None) -> None:
        from kubernetes import client

        core = client.CoreV1Api(cluster.api_client())
        self.pod, self.grace = pod, grace
        super().__init__(lambda: evict(core, namespace, pod, grace))


def check(result: TrainResult, evictor: EvictAtCheckpoint, volumes: Volumes, steps: int) -> None:
    assert evictor.error is None, evictor.error
    at = evictor.acted_at
    assert at is not None and at.checkpoint_step, "the pod was never evicted"
    assert result.succeeded and result.phase == "Completed", result.to_dict()
    # One restart for the eviction. At most one more is let through, named: CI saw it once
    # (TF2, parameter server evicted with no grace, on the loaded 2-core machine) when the
    # resumed chief exited 1 about 70 s into the new run while the kubelet could not yet post
    # a new worker's status ("no relationship found between node and this object"); the job
    # still resumed and completed. Its cause and the post-mortem are then shown as a warning.
    assert result.retries in (1, 2) and len(result.restarts) == result.retries, result.to_dict()
    first = result.restarts[0]
    assert (first["pod"], first["cause"]) == (evictor.pod, "evicted"), first
    assert result.restart_causes.startswith(f"1: evicted pod {evictor.pod}"), result.restart_causes
    if result.retries == 2:
        warnings.warn(f"{result.name}: a second restart after the eviction: {result.restarts[1].get('text')}\n"
                      f"{_post_mortem_text(result)}", stacklevel=2)
    # Resumed from a checkpoint at least as new as the one written before the eviction: not
    # from 0, and not from further back (a grace period may give one more, at the stop).
    assert result.resumed_from_step is not None and result.resumed_from_step >= at.checkpoint_step > 0, \
        (result.resumed_from_step, at)
    # One continuous run: the last attempt went on from there to the total.
    assert result.progress is not None and result.progress["step"] == steps, result.progress
    # (After a second restart, only the reports of the last attempt: its resume point is the result's.)
    last = [s for s in evictor.states if s.resumed_from_step is not None and s.step is not None
            and (result.retries == 1 or s.resumed_from_step == result.resumed_from_step)]
    after = [s.step for s in last]
    # Until the new attempt's first progress report the step shown is the last one read from
    # the old attempt (seen: MPI master stopped with a grace period, its ranks checkpointed at
    # 2538, mpiexec's last lines never reached the log, so 2000 was shown beside "resumed from
    # 2538"); from the new attempt's first report on, steps only go forward.
    new = after[next((i for i, step in enumerate(after) if step >= result.resumed_from_step), len(after)):]
    assert new and new == sorted(new) and new[-1] == steps, evictor.states
    print(f"\nreal node: {result.name}: {evictor.pod} evicted (grace {evictor.grace}) at step {at.step} "
          f"(checkpoint {at.checkpoint_step}); resumed from {result.resumed_from_step}; "
          f"{result.duration_seconds} s in all; {result.restart_causes}")


def _post_mortem_text(result: TrainResult, limit: int = 4000) -> str:
    """The readable post-mortem of the job, cut to its last `limit` characters."""
    saved = (result.post_mortem or {}).get("markdown")
    try:
        text = Path(saved).read_text(errors="replace") if saved else "(no post-mortem saved)"
    except OSError as err:
        text = f"(post-mortem unreadable: {err})"
    return text[-limit:]


@pytest.mark.parametrize(("task", "grace"), [("chief", None), ("ps", 0)], ids=["chief-default-grace", "ps-grace-0"])
def test_tf2_ps_job_evicted_mid_training_restarts_resumes_and_completes(
        cluster: Any, namespace: str, node: Any, code_url: str, volumes: Volumes, task: str, grace: int | None) -> None:
    # About 10 s of training on an idle machine (250-300 steps/s; seen: the chief evicted at
    # 650, checkpoint 500, 2 s reads), a minute or two in a full CI run: the eviction, at the
    # first checkpoint (500) plus the step's reading lag, comes well before the end either way.
    # (Every 1000 steps more cost each such test about 20 s in CI; 6000 cost another 100 s.)
    steps = 2500
    name = f"rs-{task}"
    evictor = EvictAtCheckpoint(cluster, namespace, f"{name}-{task}-0", grace)
    result = train_tf(
        name, connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=TF_TRAINER_IMAGE,
        ps=1, workers=2, chief=True, code_url=f"{code_url}/tf-ps/", data_pvc=volumes.data_pvc,
        log_pvc=volumes.log_pvc, args=["--api=tf2", f"--steps={steps}", "--threads=1", "--log_every=50",
                                       "--checkpoint_every=500", f"--model_name={name}"],
        env={"": QUIET_TF}, max_retry=3, timeout=800, progress_interval=2, progress=evictor, **placement(node),
    )
    check(result, evictor, volumes, steps)
    # The chief's global step went on counting: the model is exported at the total step count.
    metrics = json.loads((volumes.log_dir / "metrics.json").read_text())
    assert metrics["global_step"] == steps, metrics
    assert sorted(p.name for p in (volumes.log_dir / "export" / name).iterdir()) == [str(steps)]


@pytest.mark.parametrize(("task", "grace"), [("mpimaster", None), ("mpiworker", 0)],
                         ids=["master-default-grace", "worker-grace-0"])
def test_mpi_job_evicted_mid_training_restarts_resumes_and_completes(
        cluster: Any, namespace: str, node: Any, code_url: str, volumes: Volumes, task: str, grace: int | None) -> None:
    # The ranks' Allreduce runs at about 250 steps/s whether the machine is idle or loaded
    # (measured: 247 idle, about 260 in a full CI run): 12000 steps are 48 s of training, the
    # eviction at the first checkpoint (2000) comes at about 8 s. (40000 cost 110 s more.)
    steps = 12000
    name = f"rs-{task[3:]}"
    evictor = EvictAtCheckpoint(cluster, namespace, f"{name}-{task}-{1 if task == 'mpiworker' else 0}", grace)
    result = train_mpi(
        name, connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=MPI_TRAINER_IMAGE,
        workers=2, code_url=f"{code_url}/mpi/", data_pvc=volumes.data_pvc, log_pvc=volumes.log_pvc,
        command=["python3", "train.py", f"--steps={steps}", "--log_every=500", "--checkpoint_every=2000"],
        max_retry=3, timeout=800, progress_interval=2, progress=evictor, **placement(node),
    )
    check(result, evictor, volumes, steps)
    assert json.loads((volumes.log_dir / "mpi-result.json").read_text())["ranks"] == 2


def test_tf2_ps_job_rides_through_a_kubelet_restart(cluster: Any, namespace: str, node: Any, code_url: str,
                                                    volumes: Volumes) -> None:
    """The kubelet stopped and started again (same configuration and state directory) while
    the job trains: the containers run on under
    containerd, the new kubelet takes its pods back, the job completes (restarted or not:
    both are accepted, and said) and the step never hangs (its timeout bounds it)."""
    steps = 2500  # as in the eviction test above
    took: list[float] = []
    # In the step's own thread (its wait pauses for the restart's few seconds): the kubelet gets
    # its parent's death signal when the *thread* that started it ends, so a restart from a
    # short-lived thread killed the new kubelet a second later (seen: the node then ran its pods
    # unmanaged, the job stayed Running until the step's timeout).
    watcher = AtCheckpoint(lambda: took.append(node.restart_kubelet()))
    started = time.monotonic()
    result = train_tf(
        "kubelet", connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=TF_TRAINER_IMAGE,
        ps=1, workers=2, chief=True, code_url=f"{code_url}/tf-ps/", data_pvc=volumes.data_pvc,
        log_pvc=volumes.log_pvc, args=["--api=tf2", f"--steps={steps}", "--threads=1", "--log_every=50",
                                       "--checkpoint_every=500"],
        env={"": QUIET_TF}, max_retry=3, timeout=600, progress_interval=2, progress=watcher, **placement(node),
    )
    assert watcher.error is None and watcher.acted_at is not None, watcher.error
    assert took, "the kubelet restart did not finish"
    assert result.succeeded and result.phase == "Completed", result.to_dict()
    assert result.progress is not None and result.progress["step"] == steps, result.progress
    assert json.loads((volumes.log_dir / "metrics.json").read_text())["global_step"] == steps
    # A restart, if the kubelet's return caused one, is named like any other.
    assert len(result.restarts) == result.retries and all(r["cause"] != "unknown" for r in result.restarts), \
        result.restarts
    print(f"\nreal node: kubelet restarted at step {watcher.acted_at.step} (healthy again in {took[0]:.1f} s); "
          f"job Completed after {time.monotonic() - started:.0f} s with {result.retries} restart(s) "
          f"{result.restart_causes!r}")
