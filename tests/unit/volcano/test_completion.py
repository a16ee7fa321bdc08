"""When Volcano should be ending a job (volcano/completion.py): its completion condition met
by the controller's own counts while the job is Running, as each job shape sets it."""

from __future__ import annotations

from typing import Any

from volcano_pipelines.volcano.completion import CompletionWatch, completion_met, newest_warning
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.slices import most_replicas
from volcano_pipelines.volcano.spec import JobOptions, MPIJobSpec, Role, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job


def with_status(job: dict[str, Any], phase: str, succeeded: dict[str, int]) -> dict[str, Any]:
    return {**job, "status": {"state": {"phase": phase},
                              "taskStatusCount": {t: {"phase": {"Succeeded": n, "Running": 1}} for t, n in succeeded.items()}}}


def test_a_chief_that_succeeded_completes_a_tf_job() -> None:
    job = build_tf_job(TFJobSpec(job=JobOptions(name="j"), ps=Role(replicas=2), worker=Role(replicas=3), chief=Role()))
    assert completion_met(with_status(job, "Running", {"chief": 0, "worker": 3})) is None
    assert completion_met(with_status(job, "Running", {"chief": 1})) == "chief: 1/1 succeeded"
    # Completing or finished: the controller is at it.
    assert completion_met(with_status(job, "Completing", {"chief": 1})) is None


def test_workers_in_one_task_complete_a_job_without_a_chief() -> None:
    job = build_tf_job(TFJobSpec(job=JobOptions(name="j"), ps=Role(replicas=1), worker=Role(replicas=3)))
    assert completion_met(with_status(job, "Running", {"worker": 2})) is None
    assert completion_met(with_status(job, "Running", {"worker": 3})) == "worker: 3/3 succeeded"


def test_workers_split_over_tasks_complete_the_job_through_min_success() -> None:
    workers = most_replicas("j", "worker") + 1
    job = build_tf_job(TFJobSpec(job=JobOptions(name="j"), ps=Role(replicas=1), worker=Role(replicas=workers)))
    assert job["spec"]["minSuccess"] == workers
    first = next(t["replicas"] for t in job["spec"]["tasks"] if t["name"] == "worker")
    # One slice done is not the job done.
    assert completion_met(with_status(job, "Running", {"worker": first})) is None
    assert completion_met(with_status(job, "Running", {"worker": first, "worker-s1": workers - first})) == (
        f"{workers} pods succeeded (minSuccess {workers})")


def test_the_mpi_master_completes_an_mpi_job() -> None:
    job = build_mpi_job(MPIJobSpec(job=JobOptions(name="m"), worker=Role(replicas=2), command=("true",)))
    assert completion_met(with_status(job, "Running", {"mpiworker": 2})) is None
    assert completion_met(with_status(job, "Running", {"mpimaster": 1})) == "mpimaster: 1/1 succeeded"


def test_the_newest_warning_is_named() -> None:
    events = [{"type": "Normal", "reason": "Created", "lastTimestamp": "2026-01-01T00:03:00Z"},
              {"type": "Warning", "reason": "FailedDeletePod", "message": "etcdserver: mvcc: database space exceeded",
               "lastTimestamp": "2026-01-01T00:02:00Z"},
              {"type": "Warning", "reason": "OutOfSync", "message": "old", "lastTimestamp": "2026-01-01T00:01:00Z"}]
    assert newest_warning(events) == "FailedDeletePod: etcdserver: mvcc: database space exceeded"
    assert newest_warning(events[:1]) is None


def test_the_watch_waits_its_grace_and_reads_the_warning_at_most_every_reread() -> None:
    job = build_tf_job(TFJobSpec(job=JobOptions(name="j"), ps=Role(replicas=1), worker=Role(replicas=1), chief=Role()))
    met = with_status(job, "Running", {"chief": 1})
    reads: list[float] = []

    def read(at: list[float] = reads) -> str:
        at.append(0)
        return "FailedDeletePod: etcdserver: mvcc: database space exceeded"

    watch = CompletionWatch(grace_seconds=60, reread_seconds=30)
    shown = {t: watch.problem(float(t), met, read) for t in range(0, 121, 5)}
    assert all(shown[t] is None for t in range(0, 60, 5))
    assert shown[60] == ("Volcano has not completed the job 60s after chief: 1/1 succeeded (its controller is behind "
                         "or cannot act); its newest warning about the job: FailedDeletePod: etcdserver: mvcc: "
                         "database space exceeded")
    assert len(reads) == 3  # at 60, 90 and 120 s
    # Once the condition no longer holds (a restart), the wait starts over.
    assert watch.problem(125.0, with_status(job, "Running", {"chief": 0}), read) is None
    assert watch.problem(130.0, met, read) is None


def test_a_pending_job_whose_chief_succeeded_is_met_too_and_an_ending_one_is_not() -> None:
    """At 11,001 pods the chief succeeded while the gang was still starting (Pending); its
    TaskCompleted request then waited behind thousands of pod events in Volcano's queue."""
    job = build_tf_job(TFJobSpec(job=JobOptions(name="j"), ps=Role(replicas=1), worker=Role(replicas=1), chief=Role()))
    assert completion_met(with_status(job, "Pending", {"chief": 1})) == "chief: 1/1 succeeded"
    for phase in ("Completing", "Completed", "Restarting", "Aborting", "Terminating"):
        assert completion_met(with_status(job, phase, {"chief": 1})) is None, phase
