"""What run_step fills in from the KFP pod a step runs in (steps/_identity.py gives it): the run
id where the pipeline passed none, and the run's Workflow as the job's owner only where the job
stays in the pod's namespace (an owner in another namespace counts as absent, and Kubernetes'
garbage collector would delete the job at once). What the pipeline did pass is never replaced."""

from __future__ import annotations

from typing import Any

import pytest

from volcano_pipelines.kfp import runtime
from volcano_pipelines.steps import Connection
from volcano_pipelines.steps._identity import KfpPod

WORKFLOW = "argoproj.io/v1alpha1/Workflow/run-abc/0f9c-uid"


def step(run_id: str | None = None, owner: str | None = None, namespace: str | None = None,
         kubeconfig: str | None = None, context: str | None = None) -> None:
    """A stand-in with the train step's identity parameters."""


def filled(monkeypatch: pytest.MonkeyPatch, pod: KfpPod | None, **given: Any) -> dict[str, Any]:
    seen: list[Connection] = []

    def fake(connection: Connection) -> KfpPod | None:
        seen.append(connection)
        return pod

    monkeypatch.setattr("volcano_pipelines.steps.kfp_pod", fake, raising=False)
    kwargs = dict(given)
    runtime._from_kfp_pod(step, kwargs)
    if seen:
        assert seen == [given.get("connection", Connection())]
    return kwargs


def test_empty_run_id_and_owner_come_from_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = KfpPod("team-a", "step-pod", "run-77", WORKFLOW)
    assert filled(monkeypatch, pod, connection=Connection("/k")) == {"connection": Connection("/k"), "run_id": "run-77",
                                                                     "owner": WORKFLOW}
    assert filled(monkeypatch, pod, namespace="team-a") == {"namespace": "team-a", "run_id": "run-77",
                                                            "owner": WORKFLOW}


def test_a_job_in_another_namespace_gets_no_owner(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = KfpPod("team-a", "step-pod", "run-77", WORKFLOW)
    assert filled(monkeypatch, pod, namespace="training") == {"namespace": "training", "run_id": "run-77"}


def test_what_the_pipeline_passed_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    pod = KfpPod("team-a", "step-pod", "run-77", WORKFLOW)
    assert filled(monkeypatch, pod, run_id="given", owner="v1/ConfigMap/x/uid") == {
        "run_id": "given", "owner": "v1/ConfigMap/x/uid"}
    assert filled(monkeypatch, pod, run_id="given") == {"run_id": "given", "owner": WORKFLOW}


def test_a_pod_without_the_label_or_an_owner_fills_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert filled(monkeypatch, KfpPod("team-a", "step-pod", None, None)) == {}
    assert filled(monkeypatch, None) == {}  # outside a KFP pod


def test_a_step_without_those_parameters_never_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    def sync(src: str, dst: str) -> None:
        """No run identity."""

    monkeypatch.setattr("volcano_pipelines.steps.kfp_pod", lambda *a: pytest.fail("looked"), raising=False)
    kwargs: dict[str, Any] = {"src": "a", "dst": "b"}
    runtime._from_kfp_pod(sync, kwargs)
    assert kwargs == {"src": "a", "dst": "b"}
