"""The examples' training jobs on the local backend: TF parameter-server jobs (quiet TF logs),
waiting on them with the step's follower, acting on a replica once it is ready, and the MPI
example loaded as its ranks load it."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tests.helpers.local_jobs import EXAMPLES, Local, replica
from tests.helpers.progress import RecordingProgress
from volcano_pipelines.steps._follow import FollowPolicy
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.steps._waiting import WaitPolicy, run
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2"}
FOLLOW = FollowPolicy(interval_seconds=1.0, annotate_interval_seconds=1.0)


def tf_job(url: str, name: str, *, api: str, steps: int, checkpoint_every: int) -> dict[str, Any]:
    spec = TFJobSpec(
        job=JobOptions(name=name, max_retry=3),  # PodFailed -> RestartJob (the default)
        code=CodeSource(url=url + "tf-ps/"),
        ps=Role(replicas=1, env=QUIET_TF),
        worker=Role(replicas=2, env=QUIET_TF),
        chief=Role(env=QUIET_TF) if api == "tf2" else None,
        args=(f"--api={api}", f"--steps={steps}", "--threads=1", "--log_every=20",
              f"--checkpoint_every={checkpoint_every}"),
    )
    return build_tf_job(spec)


def when(local: Local, name: str, pod: str, ready: Callable[[dict[str, Any]], bool],
         act: Callable[[dict[str, Any]], None], timeout: float = 400) -> threading.Thread:
    """In the background: once `ready(replica of pod, attempt 0)` holds, `act` on it once."""
    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                r = replica(local, name, pod)
            except StopIteration:
                r = None
            if r is not None and r["pid"] and r["finished_at"] is None and ready(r):
                act(r)
                return
            time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def wait_for_job(local: Local, manifest: dict[str, Any]) -> tuple[TrainResult, RecordingProgress]:
    progress = RecordingProgress()
    local.jobs.append(("default", manifest["metadata"]["name"]))
    result = run(local.backend, manifest, WaitPolicy(timeout_seconds=900, follow=FOLLOW), progress,
                 handle_signals=False)
    return result, progress


def _mpi_example():
    # Loaded here as its ranks load it: its own directory first on the path (its heartbeat module).
    directory = str(EXAMPLES / "mpi")
    spec = importlib.util.spec_from_file_location("mpi_train", EXAMPLES / "mpi" / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(directory)
    return module
