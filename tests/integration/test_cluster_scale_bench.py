"""benchmarks/cluster_scale_bench.py at its smallest honest size, 1,101 pods (100 parameter
servers, 1,000 workers, a chief), on a control plane of its own with Volcano's controller at
raised API rates (docs/scale.md). With --stall: once the job runs, its coordinator's log (kwok
serves it, as a kubelet would) names three workers as stalled; the step names them on the job
(--on-stall warn), sees the stall cleared, and the 1,101-pod job completes. Then status, reap,
the exit handler's finish_run and status --post-mortem run on it as the benchmark runs them.
A restart of the whole gang on a stall is the benchmark's default (--on-stall restart: 1,101
pods deleted and made again, twice the time); here CI keeps to about two minutes on an idle
machine, and the restart's own tests run at a few pods (tests/node, tests/local).

What is checked is behaviour, not time: the job completes and every pod is counted; the
stalled workers are named on the job and seen cleared; the step's API requests do not grow with
the pods and list the job's pods no more often than its watch windows allow; what users read
of 1,101 pods fits 30 lines. Its figures (RSS,
CPU seconds) are printed, not asserted: the benchmark's table in docs/scale.md is where they
are compared.

Runs beside the Argo tests (scripts/test: its own process has slack there), marked `scale`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import build
from tests.needs import unavailable

# 85 s on an idle machine (130 s beside two builds; with the restart it once took 451 s in CI): room to spare.
pytestmark = [pytest.mark.scale, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
PS, WORKERS = 100, 1000
PODS = PS + WORKERS + 1
SUMMARY_LINES = 30  # issue 41: an 11,000-pod job in at most 30 lines


@pytest.fixture(scope="module")
def report() -> dict:
    if not build.is_built() and not build.go_available():
        unavailable("no control plane binaries and no Go to build them (tests/cluster/ci_prepare.sh)")
    cmd = [sys.executable, str(REPO / "benchmarks" / "cluster_scale_bench.py"), "--ps", str(PS), "--workers", str(WORKERS),
           "--chief", "--small-workers", "0", "--nodes", "12", "--stall", "--on-stall", "warn",
           "--volcano-qps", "500", "--volcano-burst", "1000", "--volcano-workers", "10"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500, cwd=REPO)
    print(proc.stderr[-4000:])  # the benchmark's tables, for the CI log
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(proc.stdout)


def test_the_step_waits_through_the_job_and_counts_every_pod(report: dict) -> None:
    run = report["runs"][-1]
    assert run["pods"] == PODS and run["phase"] == "Completed", run
    assert run["volcano_tasks"] == {"chief": 1, "ps": PS, "worker": WORKERS}
    tasks = run["result_tasks"]
    # The chief and every worker succeeded; the parameter servers, ended by the job's
    # completion, are counted as stopped (or succeeded/failed as Volcano saw them last), none lost.
    assert tasks["chief"]["succeeded"] == 1, tasks
    assert tasks["worker"]["succeeded"] == WORKERS, tasks
    assert sum(v for k, v in tasks["ps"].items() if isinstance(v, int)) >= PS, tasks


def test_stalled_workers_named_by_the_coordinator_are_named_on_the_job_and_cleared(report: dict) -> None:
    run = report["runs"][-1]
    stalled = run["result_stalled"]
    assert stalled["tasks"] == "worker[17-19]" and stalled["silent"] == "worker[17-19]", stalled
    # warn: named (the benchmark's chief waited for the job's annotation to say so), then the
    # coordinator said none is stalled; nothing restarted.
    assert stalled["action"] == "warn" and stalled.get("cleared"), stalled
    assert run["result_restart_causes"] == [] and "restarted" not in run["phases_seen"], run


def test_the_step_asks_the_api_server_little(report: dict) -> None:
    run = report["runs"][-1]
    by = run["step_api_requests_by_verb_resource"]
    # Nothing per pod: its requests follow the time it waits (watch windows, the gang's hints,
    # the progress reads), a few hundred at most on a loaded machine, never one per pod. The
    # issue's 0.18 a pod is compared in docs/scale.md, on a machine running nothing else.
    assert run["step_api_requests"] < PODS / 2, by
    # Pod lists come in pages of 500 (3 per full list here) and only when a watch must be
    # reopened from a fresh list: never more full lists than pod watch windows, plus the first.
    full_lists = by.get("list pods", 0) / 3
    assert full_lists <= by.get("watch pods", 0) + 1, by
    assert by.get("create jobs") == 1, by


def test_the_steps_after_training_answer_in_a_few_lines(report: dict) -> None:
    steps = {s["step"]: s for s in report["after_training"]}
    for step in steps.values():
        assert step["exit_code"] == 0, step
    status = steps["vpipe status"]
    assert status["stdout_lines"] <= SUMMARY_LINES, status["stdout"]
    assert "Completed" in status["stdout"] and f"{WORKERS:,}" in status["stdout"], status["stdout"]
    # One look: the job's pods listed once (3 pages of 500), no pod watch beside it.
    by = status["api_requests_by_verb_resource"]
    assert by.get("list pods") == 3 and not by.get("watch pods"), by
    finish = json.loads(steps["finish_run (run failed after training)"]["stdout"])
    assert finish["outcome"] == "failed" and finish["cleanup"] == "deleted", finish
    assert finish["post_mortem"], finish
    # The record keeps every pod; its Markdown groups them (a page, no row per pod).
    post_mortem = steps["vpipe status --post-mortem"]
    assert "pods by task and what happened" in post_mortem["stdout"], post_mortem["stdout"]
    assert "| large-worker-" not in post_mortem["stdout"] and post_mortem["stdout_lines"] <= 60, post_mortem["stdout"]
