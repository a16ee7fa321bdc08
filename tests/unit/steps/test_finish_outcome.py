"""finish_run's reading of the state the exit handler is handed: KFP's backend (ML Metadata
execution states), kfp.local and Argo's workflow.status each have their own words."""

from __future__ import annotations

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
