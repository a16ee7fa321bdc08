"""`vpipe tensorboard` and `vpipe serve` against the real control plane. kwok marks the pods
Ready (no container runs), so TF Serving's own answers come from a stand-in REST server
(tests/unit/objects/tfserving_standin.py) that serves the status format TF Serving documents:
either named with --rest-url, or reached through the API server's service proxy."""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.cluster import behaviour
from tests.helpers.lifecycle import Cluster, volcano_job
from tests.helpers.vpipe import vpipe
from tests.integration.waiting import wait_for
from tests.unit.objects.tfserving_standin import standin, status_body

pytestmark = pytest.mark.integration

TEMPLATE_HASH = "volcano-pipelines/template-hash"


def deployment(kube: Cluster, name: str) -> Any:
    try:
        return kube.apps.read_namespaced_deployment(name, kube.namespace)
    except client.ApiException as err:
        if err.status == 404:
            return None
        raise


def nothing_named(kube: Cluster, name: str) -> bool:
    services = [s.metadata.name for s in kube.core.list_namespaced_service(kube.namespace).items]
    return deployment(kube, name) is None and name not in services


# ----- tensorboard --------------------------------------------------------------------------------

def test_tensorboard_is_ready_reports_its_url_and_rerun_updates_in_place(kube: Cluster, log_pvc: str) -> None:
    kube.create_job(volcano_job("train", kube.namespace))
    args = ["tensorboard", "--name", "tb", "-n", kube.namespace, "--log-pvc", log_pvc, "--logdir", "runs/mnist",
            "--job", "train", "--ingress-path", "/tb/mnist", "--ingress-host", "tb.example", "--timeout", "120"]
    run = vpipe(kube.kubeconfig, *args)
    assert run.returncode == 0, run.stderr
    result = run.result
    assert result is not None and result["ready"] and result["created"]
    assert result["url"] == "http://tb.example/tb/mnist/"
    assert result["node_port_allocated"] and 30000 <= result["node_port"] <= 32767
    assert result["urls"]["node_port"] == f"http://10.1.0.1:{result['node_port']}/tb/mnist/"  # the node running it
    dep = deployment(kube, "tb")
    [container] = dep.spec.template.spec.containers
    mount = container.volume_mounts[0]
    assert (mount.read_only, mount.sub_path, mount.mount_path) == (True, "runs/mnist", "/logs")
    assert dep.spec.template.spec.volumes[0].persistent_volume_claim.read_only
    assert container.resources.requests == {"cpu": "100m", "memory": "512Mi"}
    assert dep.metadata.owner_references[0].name == "train"  # lives as long as the training job
    service = kube.core.read_namespaced_service("tb", kube.namespace)
    ingress = kube.networking.read_namespaced_ingress("tb", kube.namespace)
    for child in (service, ingress):
        assert child.metadata.owner_references[0].uid == dep.metadata.uid

    again = vpipe(kube.kubeconfig, *args)
    assert again.returncode == 0, again.stderr
    assert again.result is not None and not again.result["created"] and again.result["node_port"] == result["node_port"]
    same = deployment(kube, "tb")
    assert same.metadata.uid == dep.metadata.uid and same.metadata.generation == dep.metadata.generation  # no new rollout

    bigger = vpipe(kube.kubeconfig, *args, "--memory", "1Gi")
    assert bigger.returncode == 0, bigger.stderr
    updated = deployment(kube, "tb")
    assert updated.metadata.uid == dep.metadata.uid and updated.metadata.generation > dep.metadata.generation
    assert updated.spec.template.spec.containers[0].resources.limits["memory"] == "1Gi"

    # The training job goes, and so does its TensorBoard (garbage collection through ownerReferences).
    kube.custom.delete_namespaced_custom_object("batch.volcano.sh", "v1alpha1", kube.namespace, "jobs", "train")
    wait_for("tensorboard garbage-collected with the job", lambda: nothing_named(kube, "tb"), timeout=90)


def test_tensorboard_fixed_node_port_and_cluster_ip(kube: Cluster, log_pvc: str) -> None:
    port = random.randint(30000, 32767)
    run = vpipe(kube.kubeconfig, "tensorboard", "--name", "fixed", "-n", kube.namespace, "--log-pvc", log_pvc,
                "--node-port", str(port), "--node-address", "tb-node.example", "--timeout", "120")
    if run.returncode == 2 and "already allocated" in run.stderr:
        pytest.skip(f"node port {port} taken by another test")
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["node_port"] == port and not run.result["node_port_allocated"]
    assert run.result["url"] == f"http://tb-node.example:{port}/"
    inner = vpipe(kube.kubeconfig, "tensorboard", "--name", "inner", "-n", kube.namespace, "--log-pvc", log_pvc,
                  "--service-type", "ClusterIP", "--timeout", "120")
    assert inner.returncode == 0, inner.stderr
    assert inner.result is not None and inner.result["url"] == f"http://inner.{kube.namespace}.svc:6006/"
    assert inner.result["urls"]["api_proxy"].endswith(f"/api/v1/namespaces/{kube.namespace}/services/http:inner:6006/proxy/")


def test_tensorboard_bad_input_creates_nothing(kube: Cluster, log_pvc: str) -> None:
    base = ["tensorboard", "--name", "tb", "-n", kube.namespace, "--timeout", "60"]
    missing = vpipe(kube.kubeconfig, *base, "--log-pvc", "nope")
    assert missing.returncode == 2 and "--log-pvc" in missing.stderr and "existing PersistentVolumeClaim" in missing.stderr
    no_job = vpipe(kube.kubeconfig, *base, "--log-pvc", log_pvc, "--job", "ghost")
    assert no_job.returncode == 2 and "--job" in no_job.stderr
    # Only the API server knows the NodePort range: its refusal (server-side dry run) comes
    # before anything is stored.
    bad_port = vpipe(kube.kubeconfig, *base, "--log-pvc", log_pvc, "--node-port", "80")
    assert bad_port.returncode == 2 and "rejected" in bad_port.stderr, bad_port.stderr
    assert "Traceback" not in missing.stderr + no_job.stderr + bad_port.stderr
    assert nothing_named(kube, "tb")


def test_tensorboard_ttl_is_enforced_by_the_sweeper(kube: Cluster, log_pvc: str) -> None:
    run = vpipe(kube.kubeconfig, "tensorboard", "--name", "brief", "-n", kube.namespace, "--log-pvc", log_pvc,
                "--ttl", "2", "--label", "team=tb", "--no-wait")
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["expires_at"]
    sweep = vpipe(kube.kubeconfig, "reap", "--selector", "team=tb", "-n", kube.namespace, "--once", "--timeout", "60")
    assert sweep.returncode == 0, sweep.stderr
    assert sweep.result is not None and [(r["kind"], r["action"]) for r in sweep.result["reaped"]] == [("expiry", "expired")]
    wait_for("tensorboard and its Service gone", lambda: nothing_named(kube, "brief"), timeout=60)


# ----- serve -------------------------------------------------------------------------------------

def export(root: Path, *versions: int) -> Path:
    for version in versions:
        (root / str(version) / "variables").mkdir(parents=True)
        (root / str(version) / "saved_model.pb").write_bytes(b"\x08\x01")
    return root


def test_serve_waits_for_available_smoke_tests_prunes_and_rolls_back(kube: Cluster, log_pvc: str, tmp_path: Path) -> None:
    model = export(tmp_path / "mnist", 1, 2, 3)
    script = [(404, {"error": "Servable not found for request: Latest(mnist)"}), (200, status_body((3, "LOADING"))),
              (200, status_body((3, "AVAILABLE")))]
    with standin("mnist", script) as tfs:
        base = ["serve", "--name", "mnist", "-n", kube.namespace, "--pvc", log_pvc, "--model-dir-local", str(model),
                "--rest-url", tfs.url, "--timeout", "120"]
        run = vpipe(kube.kubeconfig, *base, "--smoke-payload", '{"instances": [[1.0, 2.0]]}', "--keep-versions", "2")
        assert run.returncode == 0, run.stderr
        result = run.result
        assert result is not None and result["succeeded"] and result["created"]
        assert (result["version"], result["served_versions"]) == (3, [3])
        assert result["rest_endpoint"] == f"http://mnist.{kube.namespace}.svc:8501/v1/models/mnist"
        assert result["grpc_endpoint"] == f"mnist.{kube.namespace}.svc:8500"
        assert result["smoke_test"] == {"status": 200, "ok": True, "detail": "predictions returned"}
        assert result["pruned"] == [1] and sorted(p.name for p in model.iterdir()) == ["2", "3"]
        gets = [r for r in tfs.requests if r[0] == "GET"]
        assert len(gets) >= 3  # it waited through "not found" and LOADING, not for the first 200
        assert tfs.requests[-1] == ("POST", "/v1/models/mnist:predict", {"instances": [[1.0, 2.0]]})
        good = deployment(kube, "mnist")
        assert good.spec.strategy.rolling_update.max_unavailable == 0
        [container] = good.spec.template.spec.containers
        assert container.image == "tensorflow/serving:2.16.1"
        assert "--model_base_path=/models/export/mnist" in container.args
        good_hash = good.spec.template.metadata.annotations[TEMPLATE_HASH]

        rerun = vpipe(kube.kubeconfig, *base)
        assert rerun.returncode == 0 and rerun.result is not None and not rerun.result["created"]
        assert deployment(kube, "mnist").metadata.generation == good.metadata.generation

        # A new revision whose pods never become ready: rolled back, step fails.
        broken = vpipe(kube.kubeconfig, *base, "--label", f"{behaviour.FAIL_LABEL}=3")
        assert broken.returncode == 1, broken.stderr
        assert broken.result is not None and broken.result["rolled_back"] and not broken.result["succeeded"]
        assert "rollout failed" in broken.result["message"] and "exit" in broken.result["message"]
        assert "rolled back to the previous revision" in broken.result["message"]
        back = deployment(kube, "mnist")
        assert back.spec.template.metadata.annotations[TEMPLATE_HASH] == good_hash
        wait_for("old pods serving", lambda: (deployment(kube, "mnist").status.available_replicas or 0) >= 1, timeout=60)

    # A revision that rolls out but fails the smoke test: rolled back too.
    with standin("mnist", [(200, status_body((3, "AVAILABLE")))], predict=(400, {"error": "bad input shape"})) as tfs:
        smoke = vpipe(kube.kubeconfig, "serve", "--name", "mnist", "-n", kube.namespace, "--pvc", log_pvc,
                      "--rest-url", tfs.url, "--memory", "2Gi", "--smoke-payload", '{"instances": [1]}', "--timeout", "120")
    assert smoke.returncode == 1 and smoke.result is not None and smoke.result["rolled_back"]
    assert "smoke test failed (HTTP 400): bad input shape" in smoke.result["message"]
    assert deployment(kube, "mnist").spec.template.metadata.annotations[TEMPLATE_HASH] == good_hash


def test_serve_version_policy_uses_a_model_config(kube: Cluster, log_pvc: str) -> None:
    with standin("m", [(200, status_body((1, "AVAILABLE"), (2, "AVAILABLE")))]) as tfs:
        run = vpipe(kube.kubeconfig, "serve", "--name", "m", "-n", kube.namespace, "--pvc", log_pvc,
                    "--version-policy", "specific", "--versions", "1", "--versions", "2", "--rest-url", tfs.url,
                    "--timeout", "120")
    assert run.returncode == 0, run.stderr
    assert run.result is not None and run.result["served_versions"] == [1, 2]
    [config] = [c for c in kube.core.list_namespaced_config_map(kube.namespace).items if c.metadata.name.startswith("m-config-")]
    assert "specific { versions: 1 versions: 2 }" in config.data["models.config"]
    assert config.metadata.owner_references[0].name == "m"


def test_serve_bad_export_or_pvc_creates_nothing(kube: Cluster, log_pvc: str, tmp_path: Path) -> None:
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "saved_model.pb").write_bytes(b"")
    run = vpipe(kube.kubeconfig, "serve", "--name", "m", "-n", kube.namespace, "--pvc", log_pvc,
                "--model-dir-local", str(tmp_path))
    assert run.returncode == 2 and "No versions of servable" in run.stderr and "Traceback" not in run.stderr
    missing = vpipe(kube.kubeconfig, "serve", "--name", "m", "-n", kube.namespace, "--pvc", "nope")
    assert missing.returncode == 2 and "--pvc" in missing.stderr
    assert nothing_named(kube, "m")


def host_address() -> str:
    """This machine's address that is neither loopback nor link-local (Endpoints refuse those):
    where the API server can reach the stand-in. No packet leaves the machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.123", 9))  # no traffic: picks the outgoing interface's address
        address = probe.getsockname()[0]
    if address.startswith(("127.", "169.254.")):
        pytest.skip(f"no non-loopback address on this machine (got {address})")
    return address


def test_model_status_through_the_api_server_service_proxy(kube: Cluster) -> None:
    """The default path outside a cluster: the status and :predict go through
    /api/v1/namespaces/NS/services/SVC:8501/proxy/. The Service's only endpoint is a pod
    object whose IP is this machine's, where the stand-in listens (kwok's pod IPs are fake,
    so the serve step's own pods cannot be proxied to here)."""
    from volcano_pipelines.k8s.client import connect
    from volcano_pipelines.steps._serve import (
        _proxy_fetch,
        smoke_test,
        wait_model_available,
    )

    address = host_address()
    with standin("mnist", [(200, status_body((4, "LOADING"))), (200, status_body((4, "AVAILABLE")))], bind=address) as tfs:
        port = int(tfs.url.rsplit(":", 1)[1])
        # A pod object (never scheduled: kwok never touches it) that says it has this machine's
        # address; the proxy only dials endpoint addresses that belong to such a pod.
        kube.core.create_namespaced_pod(kube.namespace, {"metadata": {"name": "standin"}, "spec": {
            "schedulerName": "vpipe-test-unscheduled",
            "containers": [{"name": "tfs", "image": "tensorflow/serving:2.16.1", "ports": [{"name": "http", "containerPort": port}]}]}})
        kube.core.patch_namespaced_pod_status("standin", kube.namespace, {"status": {
            "phase": "Running", "podIP": address, "podIPs": [{"ip": address}], "conditions": [{"type": "Ready", "status": "True"}]}})
        # A Service without a selector and its Endpoints written by hand (the EndpointSlice
        # controller skips pods without a node).
        kube.core.create_namespaced_service(kube.namespace, {"metadata": {"name": "standin"}, "spec": {
            "ports": [{"name": "http", "port": 8501, "targetPort": port}]}})
        kube.core.create_namespaced_endpoints(kube.namespace, {"metadata": {"name": "standin"}, "subsets": [{
            "addresses": [{"ip": address, "targetRef": {"kind": "Pod", "name": "standin", "namespace": kube.namespace}}],
            "ports": [{"name": "http", "port": port}]}]})
        cluster = connect(str(kube.kubeconfig))
        fetch = _proxy_fetch(cluster, kube.namespace, "standin")
        state = wait_model_available(fetch, "mnist", [4], timeout=60, interval=0.5)
        assert state.ready and state.served == (4,), state
        assert smoke_test(fetch, "mnist", {"instances": [[1.0]]})["ok"]
    assert ("POST", "/v1/models/mnist:predict", {"instances": [[1.0]]}) in tfs.requests
