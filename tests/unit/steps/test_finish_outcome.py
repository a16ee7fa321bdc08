"""finish_run's reading of the state the exit handler is handed: KFP's backend (ML Metadata
execution states), kfp.local and Argo's workflow.status each have their own words."""

from __future__ import annotations

import pytest

from volcano_pipelines.steps._finish import FAILED_STATES, SUCCEEDED_STATES, run_outcome


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
