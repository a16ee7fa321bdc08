"""Every pod vpipe creates stays out of a service mesh unless asked (issue 28, item 4): the
training pods, TensorBoard's and TF Serving's, and the Argo step pods; a user's own label wins,
and istio_sidecar=true leaves the decision to the namespace."""

from __future__ import annotations

from typing import Any

from volcano_pipelines.objects.podspec import ISTIO_INJECT
from volcano_pipelines.objects.serving import ServingSpec, build_serving
from volcano_pipelines.objects.tensorboard import TensorboardSpec, build_tensorboard
from volcano_pipelines.steps import render_mpi, render_tf

OPT_OUT = {ISTIO_INJECT: "false"}


def _templates(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {task["name"]: task["template"]["metadata"] for task in job["spec"]["tasks"]}


def test_every_training_pod_opts_out_by_default() -> None:
    for job in (render_tf("m", workers=2, chief=True), render_mpi("m", command=["python3", "train.py"])):
        for task, meta in _templates(job).items():
            assert meta["labels"][ISTIO_INJECT] == "false", task
            assert meta["annotations"][ISTIO_INJECT] == "false", task
        assert ISTIO_INJECT not in job["metadata"]["labels"]  # the Job itself is no pod


def test_istio_sidecar_leaves_it_to_the_namespace_and_a_users_label_wins() -> None:
    job = render_tf("m", istio_sidecar=True)
    for meta in _templates(job).values():
        assert ISTIO_INJECT not in meta["labels"] and ISTIO_INJECT not in meta.get("annotations", {})
    mixed = _templates(render_tf("m", pod_labels={"ps": {ISTIO_INJECT: "true"}},
                                 pod_annotations={"worker": {ISTIO_INJECT: "true"}}))
    assert mixed["ps"]["labels"][ISTIO_INJECT] == "true" and mixed["worker"]["labels"][ISTIO_INJECT] == "false"
    assert mixed["worker"]["annotations"][ISTIO_INJECT] == "true"


def test_tensorboard_and_serving_pods_opt_out_unless_asked() -> None:
    for built in (build_tensorboard(TensorboardSpec(name="tb", namespace="ml", log_pvc="logs")),
                  build_serving(ServingSpec(name="s", namespace="ml", model_name="m", pvc="logs", model_path="export/m"))):
        deployment = built[0]
        meta = deployment["spec"]["template"]["metadata"]
        assert meta["annotations"][ISTIO_INJECT] == "false" and meta["labels"][ISTIO_INJECT] == "false"
        assert ISTIO_INJECT not in deployment["spec"]["selector"]["matchLabels"]
    wanted = build_tensorboard(TensorboardSpec(name="tb", namespace="ml", log_pvc="logs", istio_sidecar=True))[0]
    meta = wanted["spec"]["template"]["metadata"]
    assert ISTIO_INJECT not in meta["labels"] and ISTIO_INJECT not in meta.get("annotations", {})


def test_argo_step_pods_opt_out() -> None:
    from tests import needs

    needs.module("hera", "the Argo templates need the [hera] extra")
    from volcano_pipelines.argo import pipelines as argo_pipelines
    from volcano_pipelines.argo import templates

    for built in (argo_pipelines.train_and_serve(), templates.step_workflow_template(templates.STEPS["train-tf"])):
        spec = built.build().spec  # type: ignore[union-attr]
        assert spec.pod_metadata.labels == OPT_OUT and spec.pod_metadata.annotations == OPT_OUT
        containers = [t for t in spec.templates if t.container is not None]
        assert containers
        for template in containers:  # the step pods (fsGroup: a root-owned volume is writable, docs/argo.md)
            assert template.security_context.fs_group == 1000, template.name
            assert template.security_context.fs_group_change_policy == "OnRootMismatch", template.name


def test_restricted_pods_meet_the_restricted_level_and_mpi_refuses_it() -> None:
    """pod_security=restricted (issue 28): every container of every task gets what the restricted
    Pod Security Standard checks; the default leaves the image's user alone (root images run)."""
    import pytest

    from volcano_pipelines.errors import InputError

    job = render_tf("m", workers=2, chief=True, evaluator=True, pod_security="restricted")
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        assert spec["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        for container in spec["containers"]:
            assert container["securityContext"] == {"allowPrivilegeEscalation": False,
                                                    "capabilities": {"drop": ["ALL"]}}, task["name"]
    plain = render_tf("m")
    assert all("securityContext" not in t["template"]["spec"] for t in plain["spec"]["tasks"])
    with pytest.raises(InputError, match="pod_security='restricted'.*sshd"):
        render_mpi("m", command=["python3", "train.py"], pod_security="restricted")
    with pytest.raises(InputError, match="pod_security='privileged'"):
        render_tf("m", pod_security="privileged")
