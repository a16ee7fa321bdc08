"""TF Serving for an exported model (pure): a Deployment of `tensorflow/serving` (the `-gpu`
variant when GPUs are requested) reading the model's base path from a PVC, gRPC on 8500 and
REST on 8501, a ClusterIP Service, and, for version policies other than "latest", a model
config file in a ConfigMap. Also the equivalent KServe InferenceService.

The ConfigMap's name carries a digest of its content, so a rollout never changes the file an
older pod template reads: rolling back the template rolls back the config too."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from volcano_pipelines.objects import builders, podspec
from volcano_pipelines.objects.rollout import stamp_template

__all__ = [
    "GRPC_PORT",
    "REST_PORT",
    "TF_SERVING_IMAGE",
    "TF_SERVING_VERSION",
    "VERSION_POLICIES",
    "VersionPolicy",
    "ServingSpec",
    "build_inference_service",
    "build_serving",
    "model_config",
    "selector",
]

TF_SERVING_VERSION = "2.16.1"  # same TensorFlow as the training image's default, so its SavedModels load
TF_SERVING_IMAGE = "tensorflow/serving"
GRPC_PORT = 8500
REST_PORT = 8501
MODEL_MOUNT = "/models"
CONFIG_MOUNT = "/etc/tfserving"
VersionPolicy = Literal["latest", "all", "specific"]
VERSION_POLICIES: tuple[str, ...] = get_args(VersionPolicy)
STEP = "serve"


@dataclass(frozen=True)
class ServingSpec:
    name: str
    namespace: str
    model_name: str
    pvc: str
    model_path: str  # the model's base path on the PVC (holds the numbered version directories)
    image: str | None = None  # None: tensorflow/serving:<pinned>[-gpu]
    replicas: int = 1
    cpu: str = "500m"
    memory: str = "1Gi"
    gpus: int = 0
    version_policy: str = "latest"
    versions: Sequence[int] = ()  # "specific": the versions to serve
    run_id: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    image_pull_secrets: Sequence[str] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    progress_deadline_seconds: int = 600
    istio_sidecar: bool = False  # False: the pods opt out of sidecar injection (objects/podspec.mesh_opt_out)
    # A new pod counts as available only after being ready this long: a server that starts
    # and then dies (bad flags, out of memory) fails the rollout instead of completing it.
    min_ready_seconds: int = 10


def selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "tf-serving", "app.kubernetes.io/instance": name}


def default_image(gpus: int) -> str:
    return f"{TF_SERVING_IMAGE}:{TF_SERVING_VERSION}{'-gpu' if gpus else ''}"


def base_path(spec: ServingSpec) -> str:
    return f"{MODEL_MOUNT}/{spec.model_path.strip('/')}"


def model_config(spec: ServingSpec) -> str | None:
    """TF Serving's model config file (text protobuf) for a version policy other than the
    default (latest), else None."""
    if spec.version_policy == "latest":
        return None
    if spec.version_policy == "all":
        policy = "all {}"
    else:
        policy = "specific { " + " ".join(f"versions: {v}" for v in spec.versions) + " }"
    return (
        "model_config_list {\n"
        "  config {\n"
        f'    name: "{spec.model_name}"\n'
        f'    base_path: "{base_path(spec)}"\n'
        '    model_platform: "tensorflow"\n'
        f"    model_version_policy {{ {policy} }}\n"
        "  }\n"
        "}\n"
    )


def config_map_name(spec: ServingSpec, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{spec.name[:40]}-config-{digest}"


def build_serving(spec: ServingSpec, deployment_owner: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """[ConfigMap?, Deployment, Service]. `deployment_owner` ties the ConfigMap and Service to
    the applied Deployment (garbage-collected with it)."""
    labels = {**spec.labels, **selector(spec.name)}
    config = model_config(spec)
    args = [f"--port={GRPC_PORT}", f"--rest_api_port={REST_PORT}"]
    mounts: list[dict[str, Any]] = [{"name": "models", "mountPath": MODEL_MOUNT, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "models", "persistentVolumeClaim": {"claimName": spec.pvc, "readOnly": True}}]
    out: list[dict[str, Any]] = []
    child_meta = builders.metadata(spec.name, spec.namespace, step=STEP, run_id=spec.run_id, labels=labels,
                                  owners=[deployment_owner] if deployment_owner else ())
    if config is None:
        args += [f"--model_name={spec.model_name}", f"--model_base_path={base_path(spec)}"]
    else:
        name = config_map_name(spec, config)
        args += [f"--model_config_file={CONFIG_MOUNT}/models.config"]
        mounts.append({"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True})
        volumes.append({"name": "config", "configMap": {"name": name}})
        out.append(builders.config_map({**child_meta, "name": name}, {"models.config": config}))
    container = podspec.container(
        name="tf-serving",
        image=spec.image or default_image(spec.gpus),
        command=["tensorflow_model_server"],
        args=args,
        resources=podspec.resources(spec.cpu, spec.memory, spec.gpus),
        mounts=mounts,
        ports=[{"name": "grpc", "containerPort": GRPC_PORT}, {"name": "http", "containerPort": REST_PORT}],
        # Answers once the model is known to the server; the step itself waits for AVAILABLE.
        readiness_probe={"httpGet": {"path": f"/v1/models/{spec.model_name}", "port": REST_PORT}, "periodSeconds": 5},
        pull_always=bool(spec.image_pull_secrets),
    )
    pod = podspec.pod_spec([container], volumes=volumes, image_pull_secrets=spec.image_pull_secrets,
                        node_selector=spec.node_selector, tolerations=spec.tolerations)
    meta = builders.metadata(spec.name, spec.namespace, step=STEP, run_id=spec.run_id, labels=labels)
    mesh = podspec.mesh_opt_out(spec.istio_sidecar)
    deployment = builders.deployment(meta, pod, selector=selector(spec.name), replicas=spec.replicas,
                                    pod_labels={**mesh, **labels}, pod_annotations=mesh)
    deployment["spec"]["progressDeadlineSeconds"] = spec.progress_deadline_seconds
    deployment["spec"]["minReadySeconds"] = spec.min_ready_seconds
    deployment = stamp_template(deployment)
    service = builders.service(child_meta, selector=selector(spec.name), ports=[
        # Named target ports: the pods say which of their ports serve gRPC and REST.
        {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc"},
        {"name": "http", "port": REST_PORT, "targetPort": "http"},
    ])
    return [*out, deployment, service]


def build_inference_service(spec: ServingSpec) -> dict[str, Any]:
    """The same model as a KServe InferenceService (tensorflow predictor on the PVC)."""
    predictor: dict[str, Any] = {
        "storageUri": f"pvc://{spec.pvc}/{spec.model_path.strip('/')}",
        "runtimeVersion": f"{TF_SERVING_VERSION}{'-gpu' if spec.gpus else ''}",
        "resources": podspec.resources(spec.cpu, spec.memory, spec.gpus),
    }
    meta = builders.metadata(spec.name, spec.namespace, step=STEP, run_id=spec.run_id,
                            labels={**spec.labels, **selector(spec.name)})
    body: dict[str, Any] = {"minReplicas": spec.replicas, "tensorflow": predictor}
    if spec.image_pull_secrets:
        body["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]
    # The predictor is a pod spec: KServe passes its placement to the serving pods.
    if spec.node_selector:
        body["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        body["tolerations"] = [dict(t) for t in spec.tolerations]
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": meta,
            "spec": {"predictor": body}}
