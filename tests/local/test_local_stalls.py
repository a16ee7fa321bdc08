"""Hung tasks through the local backend with the real examples (docs/progress.md "Hung
tasks"): a task process stopped with SIGSTOP (its pod still Running, as a hung or frozen
container's) is named within --stall-timeout while the others go on; --on-stall fail aborts
the job and the record names it; a stopped coordinator (which names the others) is named by the step itself. Real
TensorFlow processes, few and small (CI has two cores)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tests.helpers.local_jobs import FileServer, Local, replica
from tests.helpers.local_training import QUIET_TF, when
from tests.helpers.progress import RecordingProgress
from volcano_pipelines.steps._follow import FollowPolicy
from volcano_pipelines.steps._results import TrainResult
from volcano_pipelines.steps._waiting import WaitPolicy, run
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.stalls import STALLED_ANNOTATION, with_stall_timeout
from volcano_pipelines.volcano.tf import build_tf_job

STALL_TIMEOUT = 20  # beats and scans every 2 s
# Named within the timeout of the last progress, plus a beat, a scan and a read of the log.
NAMED_WITHIN = STALL_TIMEOUT + 2 + 2 + 1 + 5


class TimedProgress(RecordingProgress):
    """The notes with when they were shown (time.monotonic())."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[tuple[float, str]] = []
        self.changed = threading.Event()

    def note(self, line: str) -> None:
        super().note(line)
        self.times.append((time.monotonic(), line))
        self.changed.set()

    def first(self, pattern: str) -> float | None:
        return next((t for t, line in self.times if re.search(pattern, line)), None)


def tf_job(url: str, name: str, *, api: str, args: tuple[str, ...]) -> dict[str, Any]:
    spec = TFJobSpec(
        job=JobOptions(name=name, max_retry=3),
        code=CodeSource(url=url + "tf-ps/"),
        ps=Role(replicas=1, env=QUIET_TF),
        worker=Role(replicas=2, env=QUIET_TF),
        chief=Role(env=QUIET_TF) if api == "tf2" else None,
        args=(f"--api={api}", "--threads=1", "--log_every=20", *args),
    )
    return with_stall_timeout(build_tf_job(spec), STALL_TIMEOUT)


def wait(local: Local, manifest: dict[str, Any], progress: TimedProgress, on_stall: str) -> TrainResult:
    local.jobs.append(("default", manifest["metadata"]["name"]))
    follow = FollowPolicy(interval_seconds=1.0, annotate_interval_seconds=1.0, stall_timeout_seconds=STALL_TIMEOUT)
    return run(local.backend, manifest, WaitPolicy(timeout_seconds=600, follow=follow, on_stall=on_stall), progress,
               handle_signals=False)


def reported_past(local: Local, name: str, pod: str, step: int) -> Any:
    def ready(_r: dict[str, Any]) -> bool:
        text = Path(replica(local, name, pod)["log"]).read_text(errors="replace")
        return any(int(s) >= step for s in re.findall(r"vpipe:progress step=(\d+)", text))
    return ready


def stop(stopped: list[float]) -> Any:
    def act(r: dict[str, Any]) -> None:
        stopped.append(time.monotonic())
        os.killpg(r["pid"], signal.SIGSTOP)  # the whole pod frozen; its process stays, Running
    return act


def resume_when_named(local: Local, name: str, pod: str, progress: TimedProgress, pattern: str) -> threading.Thread:
    """Once the step named the stall: SIGCONT, the pod goes on."""
    def watch() -> None:
        deadline = time.monotonic() + 300
        while progress.first(pattern) is None and time.monotonic() < deadline:
            progress.changed.wait(1)
            progress.changed.clear()
        os.killpg(replica(local, name, pod)["pid"], signal.SIGCONT)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_stopped_tf2_worker_is_named_in_time_and_the_job_goes_on_once_it_runs_again(
        local: Local, examples_server: FileServer, dataset: Path) -> None:
    manifest = tf_job(examples_server.url, "st2", api="tf2", args=("--steps=3000", "--max_steps_per_second=100"))
    stopped: list[float] = []
    stopper = when(local, "st2", "st2-worker-1", reported_past(local, "st2", "st2-chief-0", 400), stop(stopped))
    progress = TimedProgress()
    resumer = resume_when_named(local, "st2", "st2-worker-1", progress, r"stalled: .*worker\[1\]")
    result = wait(local, manifest, progress, "warn")
    stopper.join(timeout=5)
    resumer.join(timeout=5)
    output = local.output.text()[-3000:]
    assert stopped, f"the worker was never stopped:\n{output}"
    named = progress.first(r"job st2: stalled: worker\[1\] \(no heartbeat\)")
    assert named is not None, (progress.notes, output)
    # Named after the stall timeout (less the last beat or read before the stop, never sooner) and soon after.
    assert STALL_TIMEOUT - 3 <= named - stopped[0] <= NAMED_WITHIN, (named - stopped[0], progress.notes)
    # Only the stopped worker is silent, no parameter server is named. The chief waiting for it
    # is named with it when its own last step is as old; on a loaded machine (a CI run) it
    # reported a step after the worker stopped, and the first note named the worker alone.
    episode = next(note for note in progress.notes if re.search(r"stalled: .*worker\[1\]", note))
    assert "worker[1] (no heartbeat)" in episode and "ps[" not in episode, progress.notes
    # Once it ran again, the job went on to its end: nothing restarted, the stall cleared.
    assert result.phase == "Completed" and result.retries == 0, (result, output)
    assert any("no task stalled any more" in note for note in progress.notes)
    assert result.stalled is not None and result.stalled["action"] == "warn", result.stalled
    job = local.backend.get("default", "st2")
    assert job is not None
    annotated = json.loads(job["metadata"]["annotations"][STALLED_ANNOTATION])
    if result.stalled["silent"] == "worker[1]":
        assert "cleared" in result.stalled and annotated["silent"] == "worker[1]"
    else:
        # On a loaded machine the chief may take past the timeout to step again once the worker
        # runs: a later episode of its own, which the result and the annotation then hold.
        assert result.stalled["tasks"] == "chief[0]" and annotated["tasks"] == "chief[0]", result.stalled


def test_on_stall_fail_aborts_and_the_record_names_the_one_stopped_tf1_worker(
        local: Local, examples_server: FileServer, dataset: Path) -> None:
    # TF1's workers train asynchronously: the chief (worker 0) goes on while worker 1 is stopped.
    manifest = tf_job(examples_server.url, "stf", api="tf1", args=("--steps=1000000", "--checkpoint_every=1000"))
    stopped: list[float] = []
    stopper = when(local, "stf", "stf-worker-1", reported_past(local, "stf", "stf-worker-0", 100), stop(stopped))
    progress = TimedProgress()
    started = time.monotonic()
    result = wait(local, manifest, progress, "fail")
    stopper.join(timeout=5)
    output = local.output.text()[-3000:]
    assert stopped, f"the worker was never stopped:\n{output}"
    assert not result.succeeded and result.phase == "Aborted", (result, output)
    assert result.message is not None and result.message.startswith("stalled: worker[1] (no heartbeat) for "), result
    assert result.message.endswith("job aborted (on_stall=fail)")
    assert result.stalled is not None and result.stalled["tasks"] == "worker[1]" and result.stalled["action"] == "fail"
    assert time.monotonic() - started < 300
    # The post-mortem, saved before the abort, names it.
    assert result.post_mortem is not None and "json" in result.post_mortem, result.post_mortem
    record = json.loads(Path(result.post_mortem["json"]).read_text())
    assert record["stalled"]["tasks"] == "worker[1]"
    assert "| stalled tasks | worker[1] (no heartbeat: worker[1])" in Path(result.post_mortem["markdown"]).read_text()


def test_a_stopped_chief_is_named_by_the_step_itself(local: Local, examples_server: FileServer,
                                                     dataset: Path) -> None:
    manifest = tf_job(examples_server.url, "stc", api="tf2", args=("--steps=2000", "--max_steps_per_second=100"))
    stopped: list[float] = []
    stopper = when(local, "stc", "stc-chief-0", reported_past(local, "stc", "stc-chief-0", 300), stop(stopped))
    progress = TimedProgress()
    resumer = resume_when_named(local, "stc", "stc-chief-0", progress, r"stalled: .*chief\[0\]")
    result = wait(local, manifest, progress, "warn")
    stopper.join(timeout=5)
    resumer.join(timeout=5)
    output = local.output.text()[-3000:]
    assert stopped, f"the chief was never stopped:\n{output}"
    named = progress.first(r"job stc: stalled: chief\[0\] \(no progress\)")
    assert named is not None, (progress.notes, output)
    assert STALL_TIMEOUT - 3 <= named - stopped[0] <= NAMED_WITHIN, (named - stopped[0], progress.notes)
    assert result.phase == "Completed" and result.retries == 0, (result, output)
    assert result.stalled is not None and result.stalled["tasks"] == "chief[0]" and "cleared" in result.stalled
