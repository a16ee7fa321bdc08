"""The Argo and in-cluster harness pieces that need no cluster: the controller's
configuration, image entrypoints read from archives, the node's NAT table and pod route, the
API forwarder (a real TCP round trip on loopback), and the shipped sweeper manifests."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from tests.argo import launcher
from tests.node import images
from tests.node.build import NodeArtifacts
from tests.node.launcher import APIFORWARD, KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT, RealNode
from volcano_pipelines.images import RUNTIME_IMAGE

REPO = Path(__file__).resolve().parents[2]


def test_controller_config_turns_metrics_off_and_lists_image_entrypoints(tmp_path: Path) -> None:
    archive = tmp_path / "img.tar"
    images.write_image(archive, "docker.io/volcano-pipelines/runtime:9.9", images.base_dirs(),
                       entrypoint=["vpipe"], cmd=["--help"])
    name, entry = launcher.image_entrypoint(archive)
    assert name == "docker.io/volcano-pipelines/runtime:9.9"
    assert entry == {"entrypoint": ["vpipe"], "cmd": ["--help"]}
    keys = launcher.image_keys(name)
    assert keys == ["docker.io/volcano-pipelines/runtime:9.9", "volcano-pipelines/runtime:9.9"]
    config = launcher.controller_config({k: entry for k in keys})
    assert config["metricsConfig"] == {"enabled": False} and config["telemetryConfig"] == {"enabled": False}
    assert config["images"]["volcano-pipelines/runtime:9.9"]["entrypoint"] == ["vpipe"]


def _node(tmp_path: Path, octet: int) -> RealNode:
    node = RealNode(state_dir=tmp_path, artifacts=NodeArtifacts(tmp_path), server="https://127.0.0.1:6443",
                    ca_dir=tmp_path, admin_kubeconfig=tmp_path / "kubeconfig", octet=octet)
    node.ports["apiforward"] = 40123
    return node


def test_nat_table_sends_only_this_bridge_to_its_own_forwarder(tmp_path: Path) -> None:
    rules = _node(tmp_path, 7).nat_rules()
    assert "table ip vpipe_br7 {" in rules
    assert (f'iifname "vpipe-br7" ip daddr {KUBERNETES_SERVICE_IP} tcp dport {KUBERNETES_SERVICE_PORT} '
            'dnat to 10.252.7.1:40123') in rules
    assert 'iifname "vpipe-br7" oifname != "vpipe-br7" drop' in rules
    assert "masquerade" not in rules
    # A second node on the same machine: its own table, bridge and forwarder.
    assert "vpipe-br8" in _node(tmp_path, 8).nat_rules() and "vpipe-br7" not in _node(tmp_path, 8).nat_rules()


def test_pods_get_one_route_besides_their_bridge(tmp_path: Path) -> None:
    node = _node(tmp_path, 7)
    (tmp_path / "cni" / "net.d").mkdir(parents=True)
    node._write_cni_config()
    config = yaml.safe_load((tmp_path / "cni" / "net.d" / "10-vpipe-test.conflist").read_text())
    plugin = config["plugins"][0]
    assert plugin["ipam"]["routes"] == [{"dst": f"{KUBERNETES_SERVICE_IP}/32"}]
    assert plugin["isDefaultGateway"] is False and plugin["ipMasq"] is False


def test_forwarder_copies_both_ways_and_passes_half_close() -> None:
    upstream = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        conn, _ = upstream.accept()
        with conn:
            data = b""
            while chunk := conn.recv(65536):  # until the client's half-close arrives
                data += chunk
            received.append(data)
            conn.sendall(data[::-1])

    threading.Thread(target=serve, daemon=True).start()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(APIFORWARD), f"127.0.0.1:{port}",
                             f"127.0.0.1:{upstream.getsockname()[1]}"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and "apiforward:" in proc.stdout.readline()
        payload = bytes(range(256)) * 1000
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert received == [payload] and answer == payload[::-1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        upstream.close()
    assert proc.returncode == 0  # SIGTERM ends it cleanly


def test_shipped_sweeper_manifests() -> None:
    def docs(path: str) -> list[dict]:
        return [d for d in yaml.safe_load_all((REPO / path).read_text()) if d]

    kinds = {d["kind"]: d for d in docs("manifests/sweeper/rbac/rbac.yaml")}
    assert kinds["RoleBinding"]["subjects"] == [{"kind": "ServiceAccount", "name": "vpipe-reaper"}]
    assert kinds["RoleBinding"]["roleRef"]["name"] == kinds["Role"]["metadata"]["name"] == "vpipe-reaper"
    (deployment,) = docs("manifests/sweeper/deployment/deployment.yaml")
    (cron,) = docs("manifests/sweeper/cronjob/cronjob.yaml")
    for pod in (deployment["spec"]["template"]["spec"], cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]):
        assert pod["serviceAccountName"] == "vpipe-reaper"
        (container,) = pod["containers"]
        assert container["image"] == RUNTIME_IMAGE  # this release's runtime image
        assert container["command"] == ["vpipe"] and container["args"][:3] == ["reap", "--selector",
                                                                               "volcano-pipelines/reap=true"]
    assert "--once" in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--once" not in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid" and deployment["spec"]["strategy"]["type"] == "Recreate"


def test_apiforward_exits_on_usage_error() -> None:
    run = subprocess.run([sys.executable, str(APIFORWARD)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "usage" in run.stderr
    time.sleep(0)  # nothing left running
