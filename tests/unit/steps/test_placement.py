"""Placement, the parameter group of where serve's and tensorboard's pods may run: one group in
Python, flat inputs in every front end, each step's own help (generated files unchanged:
`vpipe compile --check` in test_compile)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from volcano_pipelines.cli import main
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps import Placement, serve, tensorboard

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
