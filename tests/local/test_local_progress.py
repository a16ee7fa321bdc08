"""Progress and checkpoint/resume through the local backend, with the real examples: the
train step's wait (steps/_waiting.run, its follower reading the reporting pod's log) while
real TensorFlow / MPI processes train, are killed (SIGKILL: the pod is lost) or stopped
(SIGTERM: an eviction's grace period), restart per the job's policy and resume from their
checkpoints. Few and small (CI has two cores)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.helpers.local_jobs import FileServer, Local, replica
from tests.helpers.local_training import _mpi_example, tf_job, wait_for_job, when
from tests.helpers.progress import RecordingProgress
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.report_lines import CHECKPOINT_ANNOTATION, PROGRESS_ANNOTATION
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Role


def checkpoint_lines(path: str) -> list[int]:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    return [int(step) for step in re.findall(r"vpipe:checkpoint step=(\d+)", text)]


def check_followed(result: TrainResult, progress: RecordingProgress, steps: int) -> None:
    """What the step showed while it waited, and its result's figures."""
    # TF1's asynchronous workers may take the global step a little past the total.
    seen = [s.step for s in progress.training_states if s.step is not None]
    assert seen and seen[-1] >= steps, seen
    assert any(s.eta_seconds is not None for s in progress.training_states), progress.training_states
    assert result.progress is not None and result.progress["step"] == seen[-1] and result.progress["total"] == steps
    assert result.last_checkpoint is not None and result.last_checkpoint["step"] == seen[-1]
    assert not any("no progress reported" in note for note in progress.notes)


def test_tf1_worker_killed_restarts_and_resumes_from_a_checkpoint(local: Local, examples_server: FileServer,
                                                                 dataset: Path) -> None:
    steps = 1500
    manifest = tf_job(examples_server.url, "tf1k", api="tf1", steps=steps, checkpoint_every=100)
    killed: list[int] = []

    def kill(r: dict[str, Any]) -> None:
        killed.append(max(checkpoint_lines(replica(local, "tf1k", "tf1k-worker-0")["log"])))
        os.killpg(r["pid"], signal.SIGKILL)  # the whole pod at once, as a lost node or the OOM killer

    # Worker 1 dies once worker 0 (TF1's chief) has written a checkpoint past step 0.
    killer = when(local, "tf1k", "tf1k-worker-1",
                  lambda _r: any(step > 0 for step in checkpoint_lines(replica(local, "tf1k", "tf1k-worker-0")["log"])),
                  kill)
    result, progress = wait_for_job(local, manifest)
    killer.join(timeout=5)
    assert killed, f"the worker was never killed:\n{local.output.text()[-3000:]}"
    assert result.phase == "Completed" and result.retries == 1, (result, local.output.text()[-3000:])
    assert replica(local, "tf1k", "tf1k-worker-1")["exit_code"] == 137
    # Resumed from a checkpoint (not from 0), at or after the one seen before the kill.
    assert result.resumed_from_step is not None and result.resumed_from_step >= killed[0] > 0, result
    check_followed(result, progress, steps)
    # The annotations the step kept on the job (the local backend keeps them with the job).
    job = local.backend.get("default", "tf1k")
    assert job is not None
    annotations = job["metadata"]["annotations"]
    assert json.loads(annotations[PROGRESS_ANNOTATION])["step"] == result.progress["step"]
    assert json.loads(annotations[PROGRESS_ANNOTATION])["resumed_from_step"] == result.resumed_from_step
    assert json.loads(annotations[CHECKPOINT_ANNOTATION])["step"] == result.progress["step"]
    # One continuous run: the export's version is the global step (not the steps after resuming).
    metrics = json.loads((local.log_dir / "metrics.json").read_text())
    assert metrics["global_step"] >= steps and metrics["chief_local_steps"] < metrics["global_step"]


def test_tf2_chief_on_sigterm_checkpoints_exits_and_the_restart_resumes_there(local: Local,
                                                                               examples_server: FileServer,
                                                                               dataset: Path) -> None:
    steps = 600
    manifest = tf_job(examples_server.url, "tf2t", api="tf2", steps=steps, checkpoint_every=200)
    stopped: list[float] = []

    def terminate(r: dict[str, Any]) -> None:
        stopped.append(time.monotonic())
        os.kill(r["pid"], signal.SIGTERM)  # to the pod's init, which passes it on: a graceful stop

    # SIGTERM once the chief reports progress past its first block, between two checkpoints.
    terminate_thread = when(local, "tf2t", "tf2t-chief-0",
                            lambda r: re.search(r"vpipe:progress step=(4\d|[5-9]\d|1\d\d) ",
                                                Path(r["log"]).read_text(errors="replace")) is not None,
                            terminate)
    result, progress = wait_for_job(local, manifest)
    terminate_thread.join(timeout=5)
    assert stopped, f"the chief was never stopped:\n{local.output.text()[-3000:]}"
    chief = replica(local, "tf2t", "tf2t-chief-0")
    # It saved and went by itself within the grace period (else SIGKILL: 137), with 143: not a
    # success, so the job restarts rather than completes.
    assert chief["exit_code"] == 143, chief
    last = checkpoint_lines(chief["log"])
    assert last and last[-1] % 200 != 0, last  # the extra checkpoint SIGTERM asked for
    assert result.phase == "Completed" and result.retries == 1, (result, local.output.text()[-3000:])
    assert result.resumed_from_step == last[-1]
    check_followed(result, progress, steps)
    # The synchronous coordinator resumed where it stopped: the steps shown never went back.
    seen = [s.step for s in progress.training_states if s.step is not None]
    assert seen == sorted(seen), seen


def test_mpi_resumes_from_its_checkpoint_after_sigterm(local: Local, examples_server: FileServer,
                                                        dataset: Path) -> None:
    steps = 30000  # ~1000 steps/s on this data: long enough to be followed and stopped midway
    spec = MPIJobSpec(
        job=JobOptions(name="mpit", max_retry=3),
        command=("python3", "train.py", "--steps", str(steps), "--checkpoint_every", "5000", "--log_every", "500"),
        code=CodeSource(url=examples_server.url + "mpi/"),
        worker=Role(replicas=2),
    )
    terminate_thread = when(local, "mpit", "mpit-mpimaster-0",
                            lambda r: re.search(r"vpipe:checkpoint step=5000 ",
                                                Path(r["log"]).read_text(errors="replace")) is not None,
                            lambda r: os.kill(r["pid"], signal.SIGTERM))
    result, progress = wait_for_job(local, build_mpi_job(spec))
    terminate_thread.join(timeout=5)
    assert result.phase == "Completed" and result.retries == 1, (result, local.output.text()[-3000:])
    # Every rank stopped at the same step and rank 0 wrote a checkpoint there (not one of the
    # periodic ones): the restart went on from it. mpiexec itself exits 1 when its ranks exit
    # 143, and, being stopped too, may not pass on the ranks' last lines (seen here: the
    # SIGTERM checkpoint's report line was lost, the checkpoint was not).
    first = replica(local, "mpit", "mpit-mpimaster-0")
    assert first["exit_code"] != 0
    resumed = result.resumed_from_step
    assert resumed is not None and resumed > 5000 and resumed % 5000 != 0, (resumed, checkpoint_lines(first["log"]))
    check_followed(result, progress, steps)
    # Full-batch gradient descent is deterministic: stopping and resuming changes nothing.
    out = json.loads((local.log_dir / "mpi-result.json").read_text())
    assert out["steps"] == steps and out["examples"] == 4096
    example = _mpi_example()
    x, y = example.load(sorted(str(p) for p in dataset.glob("train-*.csv")))
    weights, bias, _, _ = example.train(x, y, x.shape[1], steps, out["learning_rate"], lambda v: v)
    assert np.allclose(out["weights"], weights, rtol=0, atol=1e-9) and abs(out["bias"] - bias) < 1e-9
