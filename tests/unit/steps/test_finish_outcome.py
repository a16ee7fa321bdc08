"""finish_run's reading of the state the exit handler is handed: KFP's backend (ML Metadata
execution states), kfp.local and Argo's workflow.status each have their own words."""

from __future__ import annotations

from typing import Any

import pytest

from volcano_pipelines.steps._finish import FAILED_STATES, SUCCEEDED_STATES, decide, run_outcome


@pytest.mark.parametrize("state", ["COMPLETE", "CACHED", "SUCCEEDED", "Succeeded", "complete", " COMPLETE "])
def test_every_success_word_is_a_success(state: str) -> None:
    assert run_outcome(state) == "succeeded"


@pytest.mark.parametrize("state", ["FAILED", "CANCELED", "CANCELLED", "FAILURE", "Failed", "Error"])
def test_every_failure_word_is_a_failure(state: str) -> None:
    assert run_outcome(state) == "failed"


@pytest.mark.parametrize("state", ["", "RUNNING", "NEW", "UNKNOWN", "Pending", "SUCCESS?"])
def test_anything_else_is_unknown(state: str) -> None:
    assert run_outcome(state) == "unknown"


def test_the_two_vocabularies_do_not_overlap() -> None:
    assert not SUCCEEDED_STATES & FAILED_STATES


# decide(): the word first, the job where the word is not an end state. KFP's backend hands the
# exit handler RUNNING after a terminate, an evicted or lost step pod, a failed driver and a
# cached or skipped (false If) last task (KFP 2.17 metadata/client.go UpdateDAGExecutionsState is
# only called by a launcher that finishes normally; driver/dag.go records a false condition
# CANCELED and stops): docs/kfp.md, "What the exit handler is handed".
@pytest.mark.parametrize(("state", "phase", "outcome", "clean_up"), [
    ("COMPLETE", "Completed", "succeeded", False),
    ("COMPLETE", "Running", "succeeded", False),  # a success word is trusted (a train step that did not wait)
    ("FAILED", "Completed", "failed", True),  # a later step failed: cleaned up per on_failure, as before
    ("CANCELED", None, "failed", True),
    ("RUNNING", "Completed", "succeeded", False),  # serve_model=false: serve skipped last, the run succeeded
    ("RUNNING", "Completing", "succeeded", False),  # the chief finished; Volcano is ending the PS
    ("RUNNING", "Failed", "failed", True),
    ("RUNNING", "Aborted", "failed", True),
    ("RUNNING", "Terminated", "failed", True),
    ("RUNNING", "Running", "failed", True),  # terminated run / evicted train pod: the job trains on, unowned
    ("RUNNING", "Pending", "failed", True),
    ("RUNNING", "Restarting", "failed", True),
    ("RUNNING", "", "failed", True),  # a job Volcano has not given a phase yet
    ("", "Running", "failed", True),
    ("NEW", "Completed", "succeeded", False),
    ("RUNNING", None, "unknown", False),  # nothing to decide from, nothing to clean up
])
def test_decide_reads_the_word_then_the_job(state: str, phase: str | None, outcome: str, clean_up: bool) -> None:
    decision = decide(state, phase)
    assert (decision.outcome, decision.clean_up) == (outcome, clean_up)
    if run_outcome(state) == "unknown" and phase is not None:
        assert (phase or "in no phase yet") in decision.rule  # the report says what the job was
        assert "not an end state" in decision.rule or "no state" in decision.rule


def test_a_job_that_is_not_waited_for_gets_no_owner() -> None:
    """Issue 28 item 3: the run's Workflow as owner would garbage-collect a submit-and-return job
    still training once the Workflow's TTL deletes it."""
    from volcano_pipelines.steps import train_tf

    owner = "argoproj.io/v1alpha1/Workflow/run-1/0b7a6a9e-2b1c-4c59-9d0d-3f9e9d1c1a11"
    waited = train_tf("m", owner=owner, dry_run=True).manifest
    submitted = train_tf("m", owner=owner, wait=False, dry_run=True).manifest
    assert waited is not None and submitted is not None
    assert [o["name"] for o in waited["metadata"]["ownerReferences"]] == ["run-1"]
    assert "ownerReferences" not in submitted["metadata"]


class CopyJobCluster:
    """The calls the exit handler makes about the run's sync copy job, recorded."""

    def __init__(self, jobs: dict[str, dict[str, Any]], fail: Exception | None = None) -> None:
        self.jobs, self.fail = jobs, fail
        self.calls: list[tuple[str, str, str]] = []

    def find_run_job(self, cluster: Any, namespace: str, run_id: str, step: str) -> dict[str, Any] | None:
        self.calls.append(("find", namespace, step))
        if self.fail is not None:
            raise self.fail
        return self.jobs.get(namespace)

    def delete_job(self, cluster: Any, namespace: str, name: str) -> None:
        self.calls.append(("delete", namespace, name))

    def abort_job(self, cluster: Any, job: dict[str, Any], reason: str) -> str:
        self.calls.append(("abort", job["metadata"]["namespace"], reason))
        return "aborted"


def _copy_job(namespace: str, phase: str | None) -> dict[str, Any]:
    job: dict[str, Any] = {"metadata": {"name": "vpipe-sync-0123456789ab", "namespace": namespace}}
    if phase is not None:
        job["status"] = {"state": {"phase": phase}}
    return job


@pytest.mark.parametrize(("phase", "on_failure", "cleanup", "call"), [
    ("Running", "delete", "deleted", ("delete", "team-a", "vpipe-sync-0123456789ab")),
    (None, "delete", "deleted", ("delete", "team-a", "vpipe-sync-0123456789ab")),  # not yet scheduled
    ("Restarting", "abort", "aborted", ("abort", "team-a", "PipelineFailed")),
    ("Pending", "keep", "kept", None),
    ("Completed", "delete", "none", None),  # finished: its step saw its end
    ("Failed", "delete", "none", None),
    ("Aborted", "abort", "none", None),
])
def test_an_unfinished_copy_job_is_settled_per_on_failure(monkeypatch: pytest.MonkeyPatch, phase: str | None,
                                                          on_failure: str, cleanup: str,
                                                          call: tuple[str, str, str] | None) -> None:
    from volcano_pipelines.k8s import volcano as k8s_volcano
    from volcano_pipelines.steps._finish import _settle_copy_job

    fake = CopyJobCluster({"team-a": _copy_job("team-a", phase)})
    for name in ("find_run_job", "delete_job", "abort_job"):
        monkeypatch.setattr(k8s_volcano, name, getattr(fake, name))
    settled = _settle_copy_job(object(), ["models", "team-a"], "run-1", on_failure)
    assert settled == {"name": "vpipe-sync-0123456789ab", "namespace": "team-a", "phase": phase or "Pending",
                       "cleanup": cleanup}
    # Looked for in the training job's namespace, then in the step's own; the step label is sync's.
    assert fake.calls[:2] == [("find", "models", "sync"), ("find", "team-a", "sync")]
    assert fake.calls[2:] == ([call] if call else [])


def test_no_copy_job_and_a_failed_lookup_are_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from volcano_pipelines.errors import ClusterError
    from volcano_pipelines.k8s import volcano as k8s_volcano
    from volcano_pipelines.kfp.summary import finish_markdown
    from volcano_pipelines.steps._finish import _settle_copy_job

    monkeypatch.setattr(k8s_volcano, "find_run_job", CopyJobCluster({}).find_run_job)
    assert _settle_copy_job(object(), ["team-a"], "run-1", "delete") is None
    broken = CopyJobCluster({}, fail=ClusterError("cannot reach the Kubernetes API server"))
    monkeypatch.setattr(k8s_volcano, "find_run_job", broken.find_run_job)
    settled = _settle_copy_job(object(), ["team-a"], "run-1", "delete")
    assert settled == {"namespace": "team-a", "error": "cannot reach the Kubernetes API server"}
    summary = finish_markdown({"run_id": "run-1", "pipeline_state": "FAILED", "copy_job": settled})
    assert "| copy job of the sync step | not settled: cannot reach the Kubernetes API server |" in summary
    done = {"name": "vpipe-sync-0123456789ab", "namespace": "team-a", "phase": "Running", "cleanup": "deleted"}
    assert "| copy job of the sync step | vpipe-sync-0123456789ab (Running): deleted |" in finish_markdown(
        {"run_id": "run-1", "pipeline_state": "FAILED", "copy_job": done})
    assert "copy job" not in finish_markdown({"run_id": "run-1", "pipeline_state": "FAILED", "copy_job": None})
