"""TensorBoard over the log PVC (pure): a Deployment that mounts the PVC read-only at the
log sub-path, a Service (NodePort or ClusterIP) and an optional Ingress under a path prefix.

The pods use the cluster's default scheduler and no PodGroup: a TensorBoard must start while
the training gang holds the queue, so it is never part of gang scheduling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from volcano_pipelines.objects import builders, podspec
from volcano_pipelines.labels import EXPIRES_ANNOTATION
from volcano_pipelines.objects.rollout import stamp_template

__all__ = ["TENSORBOARD_IMAGE", "TENSORBOARD_PORT", "TensorboardSpec", "build_tensorboard", "selector"]

# The training image's default (tensorflow/tensorflow ships the tensorboard command).
TENSORBOARD_IMAGE = "tensorflow/tensorflow:2.16.1"
TENSORBOARD_PORT = 6006
STEP = "tensorboard"
LOG_MOUNT = "/logs"


@dataclass(frozen=True)
class TensorboardSpec:
    name: str
    namespace: str
    log_pvc: str
    logdir: str = ""  # sub-path of the PVC; '' = its root
    image: str = TENSORBOARD_IMAGE
    service_type: str = "NodePort"  # or ClusterIP
    node_port: int | None = None  # None: the API server allocates one
    ingress_path: str | None = None  # e.g. /tensorboard/mnist; also TensorBoard's --path_prefix
    ingress_host: str | None = None
    ingress_class: str | None = None
    cpu: str = "100m"
    memory: str = "512Mi"
    run_id: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    image_pull_secrets: Sequence[str] = ()
    expires_at: str | None = None  # RFC 3339: the reap sweeper deletes it after this time
    # ownerReferences of the Deployment (the run's Workflow, the training job): deleted once all are gone
    owners: Sequence[Mapping[str, Any]] = ()
    istio_sidecar: bool = False  # False: the pod opts out of sidecar injection (objects/podspec.mesh_opt_out)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()


def selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "tensorboard", "app.kubernetes.io/instance": name}


def build_tensorboard(spec: TensorboardSpec, deployment_owner: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """[Deployment, Service, Ingress?]. `deployment_owner` (an ownerReference to the applied
    Deployment) ties the Service and Ingress to it, so they go when it goes."""
    labels = {**spec.labels, **selector(spec.name)}
    annotations = {EXPIRES_ANNOTATION: spec.expires_at} if spec.expires_at else None
    prefix = (spec.ingress_path or "").rstrip("/")
    args = ["--logdir", LOG_MOUNT, "--bind_all", "--port", str(TENSORBOARD_PORT)]
    if prefix:
        args += ["--path_prefix", prefix]
    mount: dict[str, Any] = {"name": "logs", "mountPath": LOG_MOUNT, "readOnly": True}
    if spec.logdir.strip("/"):
        mount["subPath"] = spec.logdir.strip("/")
    container = podspec.container(
        name="tensorboard",
        image=spec.image,
        command=["tensorboard"],
        args=args,
        resources=podspec.resources(spec.cpu, spec.memory),
        mounts=[mount],
        ports=[{"name": "http", "containerPort": TENSORBOARD_PORT}],
        readiness_probe={"httpGet": {"path": f"{prefix}/", "port": TENSORBOARD_PORT}, "periodSeconds": 5},
        pull_always=bool(spec.image_pull_secrets),
    )
    pod = podspec.pod_spec(
        [container],
        volumes=[{"name": "logs", "persistentVolumeClaim": {"claimName": spec.log_pvc, "readOnly": True}}],
        image_pull_secrets=spec.image_pull_secrets,
        node_selector=spec.node_selector,
        tolerations=spec.tolerations,
    )
    meta = builders.metadata(spec.name, spec.namespace, step=STEP, run_id=spec.run_id, labels=labels,
                            annotations=annotations, owners=list(spec.owners))
    mesh = podspec.mesh_opt_out(spec.istio_sidecar)
    deployment = builders.deployment(meta, pod, selector=selector(spec.name), pod_labels={**mesh, **labels},
                                    pod_annotations=mesh)
    deployment = stamp_template(deployment)
    child_owners = [deployment_owner] if deployment_owner else ()
    child_meta = builders.metadata(spec.name, spec.namespace, step=STEP, run_id=spec.run_id, labels=labels,
                                  owners=child_owners)
    port: dict[str, Any] = {"name": "http", "port": TENSORBOARD_PORT, "targetPort": TENSORBOARD_PORT}
    if spec.service_type == "NodePort" and spec.node_port is not None:
        port["nodePort"] = spec.node_port
    out = [deployment, builders.service(child_meta, selector=selector(spec.name), ports=[port],
                                       service_type=spec.service_type)]
    if prefix:
        out.append(builders.ingress(child_meta, service_name=spec.name, port=TENSORBOARD_PORT, path=prefix,
                                   host=spec.ingress_host, ingress_class=spec.ingress_class))
    return out
