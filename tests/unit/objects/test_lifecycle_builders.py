"""The TensorBoard and TF Serving builders (pure): what the objects promise — read-only
mounts at the right path, resources set, no gang scheduling, maxUnavailable 0, pinned images
with the -gpu variant, a model config only for non-default version policies, ownership."""

from __future__ import annotations

from typing import Any

from volcano_pipelines.objects.serving import (
    ServingSpec,
    build_inference_service,
    build_serving,
    model_config,
)
from volcano_pipelines.objects.tensorboard import TensorboardSpec, build_tensorboard
from volcano_pipelines.lifecycle.reap import EXPIRES_ANNOTATION
from volcano_pipelines.objects.rollout import TEMPLATE_HASH_ANNOTATION


def pod_spec(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


def test_tensorboard_reads_the_log_sub_path_read_only_under_a_prefix() -> None:
    spec = TensorboardSpec(name="tb", namespace="ml", log_pvc="logs", logdir="/runs/mnist/", ingress_path="/tb/mnist/",
                           ingress_host="tb.example", expires_at="2026-01-01T00:00:00Z", run_id="r1")
    deployment, service, ingress = build_tensorboard(spec, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "tb", "uid": "u"})
    pod = pod_spec(deployment)
    [container] = pod["containers"]
    assert container["volumeMounts"] == [{"name": "logs", "mountPath": "/logs", "readOnly": True, "subPath": "runs/mnist"}]
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "logs", "readOnly": True}
    assert container["args"][container["args"].index("--path_prefix") + 1] == "/tb/mnist"
    assert container["readinessProbe"]["httpGet"]["path"] == "/tb/mnist/"
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "512Mi"}
    assert "schedulerName" not in pod  # the cluster's default scheduler: never held by a training gang
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert deployment["metadata"]["annotations"][EXPIRES_ANNOTATION] == "2026-01-01T00:00:00Z"
    assert TEMPLATE_HASH_ANNOTATION in deployment["spec"]["template"]["metadata"]["annotations"]
    assert service["spec"]["type"] == "NodePort" and "nodePort" not in service["spec"]["ports"][0]
    assert ingress["spec"]["rules"][0]["host"] == "tb.example"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["path"] == "/tb/mnist"
    for child in (service, ingress):
        assert child["metadata"]["ownerReferences"][0]["uid"] == "u"  # gone with the Deployment
        assert child["metadata"]["labels"]["volcano-pipelines/run"] == "r1"


def test_tensorboard_fixed_node_port_cluster_ip_and_job_owner() -> None:
    fixed = build_tensorboard(TensorboardSpec(name="tb", namespace="ml", log_pvc="logs", node_port=30123))
    assert fixed[1]["spec"]["ports"][0]["nodePort"] == 30123 and len(fixed) == 2
    inner = build_tensorboard(TensorboardSpec(name="tb", namespace="ml", log_pvc="logs", service_type="ClusterIP"))
    assert inner[1]["spec"]["type"] == "ClusterIP"
    mount = pod_spec(inner[0])["containers"][0]["volumeMounts"][0]
    assert "subPath" not in mount  # the PVC's root
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "mnist", "uid": "j"}
    run = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "run-1", "uid": "w"}
    owned = build_tensorboard(TensorboardSpec(name="tb", namespace="ml", log_pvc="logs", owners=(run, owner)))
    assert owned[0]["metadata"]["ownerReferences"] == [run, owner]  # deleted once both are gone


def test_template_hash_changes_with_the_template_only() -> None:
    a = build_tensorboard(TensorboardSpec(name="tb", namespace="ml", log_pvc="logs"))[0]
    b = build_tensorboard(TensorboardSpec(name="tb", namespace="ml", log_pvc="logs", expires_at="2030-01-01T00:00:00Z"))[0]
    c = build_tensorboard(TensorboardSpec(name="tb", namespace="ml", log_pvc="logs", logdir="other"))[0]

    def digest(d: dict[str, Any]) -> str:
        return str(d["spec"]["template"]["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION])

    assert digest(a) == digest(b) != digest(c)


def test_tf_serving_deployment() -> None:
    spec = ServingSpec(name="mnist", namespace="ml", model_name="mnist", pvc="logs", model_path="export/mnist/")
    deployment, service = build_serving(spec)
    [container] = pod_spec(deployment)["containers"]
    assert container["image"] == "tensorflow/serving:2.16.1"
    assert container["command"] == ["tensorflow_model_server"]
    assert container["args"] == ["--port=8500", "--rest_api_port=8501", "--model_name=mnist",
                                 "--model_base_path=/models/export/mnist"]
    assert {p["containerPort"] for p in container["ports"]} == {8500, 8501}
    assert container["volumeMounts"][0]["readOnly"] and pod_spec(deployment)["volumes"][0]["persistentVolumeClaim"]["readOnly"]
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert deployment["spec"]["progressDeadlineSeconds"] == 600
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [("grpc", 8500, "grpc"), ("http", 8501, "http")]
    assert service["spec"]["type"] == "ClusterIP"


def test_tf_serving_gpu_image_and_model_config() -> None:
    gpu = build_serving(ServingSpec(name="m", namespace="ml", model_name="m", pvc="logs", model_path="export/m", gpus=2))
    [container] = pod_spec(gpu[0])["containers"]
    assert container["image"] == "tensorflow/serving:2.16.1-gpu"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    spec = ServingSpec(name="m", namespace="ml", model_name="m", pvc="logs", model_path="export/m", version_policy="specific",
                       versions=(3, 5))
    config, deployment, _service = build_serving(spec, {"apiVersion": "apps/v1", "kind": "Deployment", "name": "m", "uid": "u"})
    text = config["data"]["models.config"]
    assert 'base_path: "/models/export/m"' in text and "specific { versions: 3 versions: 5 }" in text
    [container] = pod_spec(deployment)["containers"]
    assert "--model_config_file=/etc/tfserving/models.config" in container["args"]
    assert not any(a.startswith("--model_name") for a in container["args"])
    assert pod_spec(deployment)["volumes"][1]["configMap"]["name"] == config["metadata"]["name"]
    assert config["metadata"]["ownerReferences"][0]["uid"] == "u"
    other = build_serving(ServingSpec(name="m", namespace="ml", model_name="m", pvc="logs", model_path="export/m",
                                      version_policy="all"))[0]
    assert other["metadata"]["name"] != config["metadata"]["name"]  # new content, new name: rollbacks keep the old file
    assert "all {}" in (model_config(ServingSpec(name="m", namespace="ml", model_name="m", pvc="p", model_path="x",
                                                 version_policy="all")) or "")


def test_kserve_inference_service() -> None:
    spec = ServingSpec(name="mnist", namespace="ml", model_name="mnist", pvc="logs", model_path="/export/mnist", replicas=2)
    isvc = build_inference_service(spec)
    assert isvc["apiVersion"] == "serving.kserve.io/v1beta1" and isvc["kind"] == "InferenceService"
    predictor = isvc["spec"]["predictor"]
    assert predictor["minReplicas"] == 2
    assert predictor["tensorflow"]["storageUri"] == "pvc://logs/export/mnist"
    assert predictor["tensorflow"]["runtimeVersion"] == "2.16.1"


def test_serving_pods_go_where_the_node_selector_and_tolerations_say() -> None:
    placement = {"node_selector": {"pool": "serving"},
                 "tolerations": ({"key": "pool", "operator": "Equal", "value": "serving", "effect": "NoSchedule"},)}
    spec = ServingSpec(name="m", namespace="ml", model_name="m", pvc="logs", model_path="export/m", **placement)
    deployment = next(o for o in build_serving(spec) if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "serving"} and pod["tolerations"] == list(placement["tolerations"])
    predictor = build_inference_service(spec)["spec"]["predictor"]
    assert predictor["nodeSelector"] == {"pool": "serving"} and predictor["tolerations"] == list(placement["tolerations"])
