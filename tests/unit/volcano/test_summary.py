"""A job at a glance (issue 41 item 4): the seed's 11,000-pod job in at most 30 lines, with the
figures, and the 3-pod job still readable."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from volcano_pipelines.volcano.status import JobStatus, TaskCounts, counts_from_pods
from volcano_pipelines.volcano.summary import MAX_LINES, JobSummary, abnormal_pods, format_ranges, range_count, summary_lines


def pod(job: str, task: str, index: int, phase: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"{job}-{task}-{index}", "annotations": {"volcano.sh/task-spec": task}},
            "status": {"phase": phase, **status}}


def oom() -> dict[str, Any]:
    return {"containerStatuses": [{"name": "main", "state": {"terminated": {
        "exitCode": 137, "reason": "OOMKilled", "finishedAt": "2026-12-05T10:00:00Z"}}}]}


def seed_job() -> list[dict[str, Any]]:
    """1,000 parameter servers and 10,000 workers: ps 3 and 700 evicted, workers 12-15 and 803
    OOM killed, worker 40 exited 1, workers 9990-9999 still pending, the rest running."""
    pods = []
    for i in range(1000):
        if i in (3, 700):
            pods.append(pod("seed", "ps", i, "Failed", reason="Evicted", message="low on memory"))
        else:
            pods.append(pod("seed", "ps", i, "Running"))
    for i in range(10_000):
        if i in (12, 13, 14, 15, 803):
            pods.append(pod("seed", "worker", i, "Failed", **oom()))
        elif i == 40:
            pods.append(pod("seed", "worker", i, "Failed", containerStatuses=[
                {"name": "main", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]))
        elif i >= 9990:
            pods.append(pod("seed", "worker", i, "Pending"))
        else:
            pods.append(pod("seed", "worker", i, "Running"))
    return pods


def test_the_seeds_job_fits_a_screen_with_every_figure() -> None:
    pods = seed_job()
    status = JobStatus("Running", retries=2, tasks=counts_from_pods(pods))
    restarts = [{"number": 1, "cause": "evicted", "pod": "seed-ps-3"},
                {"number": 2, "cause": "exit code 1", "pod": "seed-worker-40"}]
    summary = JobSummary.of("seed", status, abnormal=abnormal_pods(pods, "Running"), restarts=restarts,
                            stalled=[("worker[17]", 240.0), ("worker[5000-5003]", 95.0)])
    lines = summary_lines(summary)
    text = "\n".join(lines)
    assert len(lines) <= MAX_LINES, text
    assert lines[0] == "job seed: Running (retries 2)"
    assert "  ps      1,000 pods: 998 running, 2 failed" in lines
    assert "  worker  10,000 pods: 9,984 running, 10 pending, 6 failed" in lines
    assert "restarts (2): evicted, exit code 1" in lines
    assert "failed: OOM killed (5): worker[12-15,803]" in lines
    assert "failed: evicted (2): ps[3,700]" in lines
    assert "failed: exit code 1 (1): worker[40]" in lines
    assert "pending (10): worker[9990-9999]" in lines
    assert "stalled: worker[17] (no progress for 4m00s)" in lines
    assert "stalled: worker[5000-5003] (no progress for 1m35s)" in lines
    # Failures before the pending, the most pods first; no row per pod anywhere.
    assert lines.index("failed: OOM killed (5): worker[12-15,803]") < lines.index("pending (10): worker[9990-9999]")
    assert not re.search(r"seed-worker-\d", text)


def test_scattered_failures_are_counted_not_cut_silently() -> None:
    # Every other worker failed: 5,000 ranges of one pod each. One line, a dozen ranges, a count.
    pods = [pod("seed", "worker", i, "Failed" if i % 2 else "Running", **(oom() if i % 2 else {}))
            for i in range(10_000)]
    abnormal = abnormal_pods(pods)
    assert range_count(abnormal["failed: OOM killed"]["worker"]) == 5000  # --json: every one
    lines = summary_lines(JobSummary.of("seed", JobStatus("Running", tasks=counts_from_pods(pods)), abnormal=abnormal))
    [line] = [line for line in lines if line.startswith("failed: OOM killed")]
    assert line.startswith("failed: OOM killed (5,000): worker[1,3,5,7,9,11,13,15,17,19,21,23]")
    assert line.endswith(" and 4,988 more")


def test_more_groups_than_room_say_how_many_lines_were_left_out() -> None:
    abnormal = {f"failed: exit code {code}": {"worker": str(code)} for code in range(1, 60)}
    lines = summary_lines(JobSummary("big", "Running", tasks={"worker": TaskCounts(running=100, failed=59)},
                                     abnormal=abnormal))
    assert len(lines) == MAX_LINES
    assert lines[-1] == "… 32 more lines left out (--json has every figure)"


def test_three_pods_read_as_three_short_lines() -> None:
    pods = [pod("tiny", "chief", 0, "Running"), pod("tiny", "ps", 0, "Running"), pod("tiny", "worker", 0, "Pending")]
    status = JobStatus("Running", tasks=counts_from_pods(pods))
    lines = summary_lines(JobSummary.of("tiny", status, abnormal=abnormal_pods(pods)))
    assert lines == ["job tiny: Running",
                     "  chief   1 pod: 1 running",
                     "  ps      1 pod: 1 running",
                     "  worker  1 pod: 1 pending",
                     "pending (1): worker[0]"]


def test_a_gang_that_waits_is_not_listed_pod_by_pod() -> None:
    pods = [pod("g", "worker", i, "Pending") for i in range(4)]
    status = JobStatus("Pending", tasks=counts_from_pods(pods))
    lines = summary_lines(JobSummary.of("g", status, "NotEnoughResources: 4/4 tasks in gang unschedulable",
                                        abnormal=abnormal_pods(pods)))
    assert lines == ["job g: Pending", "  worker  4 pods: 4 pending",
                     "  waiting: NotEnoughResources: 4/4 tasks in gang unschedulable"]


def test_ranges() -> None:
    assert format_ranges([803, 12, 13, 14, 15, 14]) == "12-15,803"
    assert range_count("12-15,803") == 5 and range_count("") == 0
    assert format_ranges([]) == ""


def test_vpipe_status_of_the_seeds_job_fits_a_screen_and_json_keeps_every_figure(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, job
    from volcano_pipelines.cli import main
    from volcano_pipelines.steps import _train as train_step

    pods = seed_job()
    counts = {task: {"Running": c.running, "Pending": c.pending, "Failed": c.failed}
              for task, c in counts_from_pods(pods).items()}
    backend = MemoryBackend([], FakeClock())
    backend.current, backend.remaining_pods = job("Running", retries=2, tasks=counts, name="seed"), pods
    monkeypatch.setattr(train_step, "_cluster_backend", lambda *_: backend)
    assert main(["status", "seed", "-n", "ns"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= MAX_LINES, out
    assert lines[0] == "job ns/seed: Running, 2 restart(s)"
    assert "  worker  10,000 pods: 9,984 running, 10 pending, 6 failed" in lines
    assert "failed: OOM killed (5): worker[12-15,803]" in lines and "pending (10): worker[9990-9999]" in lines
    assert main(["status", "seed", "-n", "ns", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["abnormal"]["failed: OOM killed"] == {"worker": "12-15,803"}
    assert result["tasks"]["worker"] == {"pending": 10, "running": 9984, "succeeded": 0, "failed": 6, "stopped": 0}
