"""The parameter groups serve and tensorboard share: Placement (where their pods may run) and
ObjectLabels (what their objects carry). One group in Python, flat inputs in every front end,
each step's own help (generated files unchanged: `vpipe compile --check` in test_compile)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from volcano_pipelines.cli import main
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps import ObjectLabels, Placement, serve, tensorboard

TOLERATION = {"key": "pool", "operator": "Equal", "value": "services", "effect": "NoSchedule"}


@pytest.mark.parametrize(("step", "selector_help", "toleration_help"), [
    (serve, "node labels the serving pods must match", "taints the serving pods tolerate"),
    (tensorboard, "node labels the pod must match", "taints the pod tolerates"),
])
def test_each_step_shows_the_group_as_flat_inputs_with_its_own_help(step: Any, selector_help: str,
                                                                     toleration_help: str) -> None:
    shown = {p.name: p.help for p in params(step)}
    assert "placement" not in shown
    assert shown["node_selector"].startswith(selector_help)
    assert shown["tolerations"].startswith(toleration_help)


def _pod_spec(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def test_the_group_reaches_the_pods_from_python_and_from_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    placement = Placement(node_selector={"pool": "services"}, tolerations=["pool=services:NoSchedule"])
    board = tensorboard("tb", log_pvc="logs", namespace="ml", placement=placement, dry_run=True)
    served = serve("mnist", pvc="logs", namespace="ml", placement=placement, dry_run=True)
    for manifests in (board.manifests, served.manifests):
        pod = _pod_spec(manifests)
        assert pod["nodeSelector"] == {"pool": "services"} and pod["tolerations"] == [TOLERATION]

    assert main(["tensorboard", "--name", "tb", "--log-pvc", "logs", "--namespace", "ml", "--dry-run", "--json",
                 "--node-selector", "pool=services", "--toleration", "pool=services:NoSchedule"]) == 0
    pod = _pod_spec(json.loads(capsys.readouterr().out)["manifests"])
    assert pod["nodeSelector"] == {"pool": "services"} and pod["tolerations"] == [TOLERATION]


def test_nothing_given_places_the_pods_anywhere() -> None:
    pod = _pod_spec(tensorboard("tb", log_pvc="logs", namespace="ml", dry_run=True).manifests)
    assert "nodeSelector" not in pod and "tolerations" not in pod


@pytest.mark.parametrize(("step", "sidecar_help"), [
    (serve, "let a service mesh inject its sidecar into the serving pods"),
    (tensorboard, "let a service mesh inject its sidecar into the pod "),
])
def test_the_labels_group_shows_as_flat_inputs_with_each_steps_help(step: Any, sidecar_help: str) -> None:
    shown = {p.name: p.help for p in params(step)}
    assert "object_labels" not in shown
    assert shown["run_id"] == "run identity label" and shown["labels"] == "labels on every object"
    assert shown["istio_sidecar"].startswith(sidecar_help)


def _all_labelled(manifests: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [m["metadata"]["labels"] for m in manifests]


def test_the_labels_group_reaches_every_object_from_python_and_from_the_flags(
        capsys: pytest.CaptureFixture[str]) -> None:
    marks = ObjectLabels(run_id="run-9", labels={"team": "ml"}, istio_sidecar=True)
    board = tensorboard("tb", log_pvc="logs", namespace="ml", object_labels=marks, dry_run=True)
    served = serve("mnist", pvc="logs", namespace="ml", object_labels=marks, dry_run=True)
    assert main(["tensorboard", "--name", "tb", "--log-pvc", "logs", "--namespace", "ml", "--dry-run", "--json",
                 "--run-id", "run-9", "--label", "team=ml", "--istio-sidecar"]) == 0
    from_flags = json.loads(capsys.readouterr().out)["manifests"]
    for manifests in (board.manifests, served.manifests, from_flags):
        for labels in _all_labelled(manifests):
            assert labels["team"] == "ml" and labels["volcano-pipelines/run"] == "run-9", labels
        pod_labels = _pod_spec_labels(manifests)
        assert pod_labels.get("sidecar.istio.io/inject") != "false"  # the mesh may inject: no opt-out label
    default_pod = _pod_spec_labels(tensorboard("tb", log_pvc="logs", namespace="ml", dry_run=True).manifests)
    assert default_pod["sidecar.istio.io/inject"] == "false"


def _pod_spec_labels(manifests: list[dict[str, Any]]) -> dict[str, str]:
    deployment = next(m for m in manifests if m["kind"] == "Deployment")
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def test_the_pull_secrets_help_is_the_hints_with_each_steps_wording() -> None:
    for step, text in ((serve, "pull secrets of the pods"), (tensorboard, "pull secrets of the pod")):
        found = {p.name: p for p in params(step)}["image_pull_secrets"]
        assert found.help == text and found.default is None, step.__name__
        assert "image_pull_secrets:" not in (step.__doc__ or ""), step.__name__  # written once, on the hint
