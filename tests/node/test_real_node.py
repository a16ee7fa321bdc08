"""The real test node runs real containers: pods run on it, their logs come back through
the API server, pods talk to each other over the bridge and find each other through
CoreDNS, reach the test's own servers on the gateway address and nothing off the bridge,
answer through the API server's service proxy, and a stopped node leaves nothing behind."""

from __future__ import annotations

import http.server
import ipaddress
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.node import build as node_build
from tests.node.launcher import RealNode, pod_placement

pytestmark = [pytest.mark.integration, pytest.mark.realnode]


def _core(cluster: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client())


def _pod(node: RealNode, name: str, script: str, **spec: Any) -> dict:
    """A busybox pod on the real node running ``sh -c script``."""
    labels = spec.pop("labels", {})
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            **pod_placement(),
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": node.busybox_image, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script]}],
            **spec,
        },
    }


def _wait_pod(core: Any, namespace: str, name: str, done: Callable[[Any], bool], timeout: float = 120.0) -> Any:
    end = time.monotonic() + timeout
    while True:
        pod = core.read_namespaced_pod(name, namespace)
        if done(pod):
            return pod
        if time.monotonic() > end:
            raise AssertionError(f"pod {name} not there after {timeout:.0f}s: phase {pod.status.phase}, "
                                 f"{pod.status.container_statuses}")
        time.sleep(0.5)


def _finished(pod: Any) -> bool:
    return pod.status.phase in ("Succeeded", "Failed")


def _running_with_ip(pod: Any) -> bool:
    return pod.status.phase == "Running" and bool(pod.status.pod_ip)


def _log(core: Any, namespace: str, name: str) -> str:
    return core.read_namespaced_pod_log(name, namespace)


@pytest.fixture
def gateway_http(real_node: RealNode, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An HTTP server of the test on the bridge's gateway address: (url, served token)."""
    token = f"served-{uuid.uuid4().hex}"
    (tmp_path / "token.txt").write_text(token + "\n")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((real_node.gateway_ip, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)  # shutdown waits one poll
    thread.start()
    try:
        yield f"http://{real_node.gateway_ip}:{server.server_address[1]}/token.txt", token
    finally:
        server.shutdown()
        server.server_close()


def test_pod_runs_on_the_real_node_and_its_log_comes_back(cluster, real_node: RealNode, namespace: str) -> None:
    core = _core(cluster)
    token = uuid.uuid4().hex
    core.create_namespaced_pod(namespace, _pod(real_node, "hello", f"echo hello-{token}; cat /etc/resolv.conf"))
    pod = _wait_pod(core, namespace, "hello", _finished)
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name == real_node.name
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(real_node.subnet)
    log = _log(core, namespace, "hello")
    assert f"hello-{token}" in log
    # The kubelet gave the pod the cluster DNS on the gateway and the cluster search path.
    assert f"nameserver {real_node.gateway_ip}" in log
    assert f"{namespace}.svc.cluster.local" in log


def test_pods_talk_over_tcp_across_the_bridge(cluster, real_node: RealNode, namespace: str) -> None:
    core = _core(cluster)
    token = uuid.uuid4().hex
    core.create_namespaced_pod(namespace, _pod(real_node, "server", f"echo pong-{token} | nc -l -p 7000"))
    server = _wait_pod(core, namespace, "server", _running_with_ip)
    client_script = (f"for i in $(seq 1 30); do nc -w 5 {server.status.pod_ip} 7000 </dev/null && exit 0; "
                     "sleep 1; done; exit 1")
    core.create_namespaced_pod(namespace, _pod(real_node, "client", client_script))
    client = _wait_pod(core, namespace, "client", _finished)
    assert client.status.phase == "Succeeded", _log(core, namespace, "client")
    assert f"pong-{token}" in _log(core, namespace, "client")
    assert _wait_pod(core, namespace, "server", _finished).status.phase == "Succeeded"


def test_headless_service_name_resolves_to_the_pod_ip(cluster, real_node: RealNode, namespace: str) -> None:
    """As Volcano's svc plugin sets it up: a headless Service and pods with hostname and
    subdomain; CoreDNS answers both the service name and the pod's own name (busybox's
    nslookup ignores the search path, so both are asked fully qualified)."""
    core = _core(cluster)
    core.create_namespaced_service(namespace, {
        "metadata": {"name": "workers"},
        "spec": {"clusterIP": "None", "selector": {"app": "dns-target"}, "publishNotReadyAddresses": True,
                 "ports": [{"name": "p", "port": 7000}]},
    })
    core.create_namespaced_pod(namespace, _pod(real_node, "target", "sleep 600", labels={"app": "dns-target"},
                                               hostname="worker-0", subdomain="workers"))
    target = _wait_pod(core, namespace, "target", _running_with_ip)
    ip = target.status.pod_ip
    script = (
        "for i in $(seq 1 60); do "
        "nslookup workers.$NS.svc.cluster.local > /tmp/a 2>&1 && grep -q $IP /tmp/a && "
        "nslookup worker-0.workers.$NS.svc.cluster.local > /tmp/b 2>&1 && grep -q $IP /tmp/b && break; sleep 1; done; "
        "cat /tmp/a /tmp/b"
    )
    body = _pod(real_node, "resolver", script)
    body["spec"]["containers"][0]["env"] = [{"name": "NS", "value": namespace}, {"name": "IP", "value": ip}]
    core.create_namespaced_pod(namespace, body)
    resolver = _wait_pod(core, namespace, "resolver", _finished)
    log = _log(core, namespace, "resolver")
    assert resolver.status.phase == "Succeeded", log
    # Both lookups answered with the target pod's address (busybox prints "Address: IP").
    assert log.count(f"Address: {ip}") >= 2, log


def test_pod_reaches_the_gateway_and_nothing_off_the_bridge(
    cluster, real_node: RealNode, namespace: str, gateway_http: tuple[str, str]
) -> None:
    core = _core(cluster)
    url, token = gateway_http
    host_port, path = url.removeprefix("http://").split("/", 1)
    host, port = host_port.split(":")
    # HTTP by hand over nc: Debian's busybox-static wget crashes (SIGSEGV) on this machine.
    script = (
        f"printf 'GET /{path} HTTP/1.0\\r\\n\\r\\n' | nc -w 10 {host} {port}; echo http-gateway=$?; "
        "nc -w 3 1.1.1.1 80 </dev/null; echo nc-outside=$?; "
        # The kubernetes Service's address is routed to the host, but only its API port answers.
        "nc -w 3 $KUBERNETES_SERVICE_HOST 80 </dev/null; echo nc-service-other-port=$?; "
        "nslookup example.com; echo dns-outside=$?; "
        "ip route; echo routes-done"
    )
    core.create_namespaced_pod(namespace, _pod(real_node, "fence", script))
    assert _wait_pod(core, namespace, "fence", _finished).status.phase == "Succeeded"
    log = _log(core, namespace, "fence")
    assert token in log and "http-gateway=0" in log, log
    assert "nc-outside=0" not in log and "nc-outside=" in log, log
    assert "nc-service-other-port=0" not in log and "nc-service-other-port=" in log, log
    assert "dns-outside=0" not in log and "dns-outside=" in log, log  # CoreDNS forwards nothing
    routes = log.split("dns-outside=")[1].split("routes-done")[0]
    assert "default" not in routes, routes
    assert real_node.subnet in routes, routes  # the bridge subnet is the only route


def test_pods_reach_the_api_server_at_the_kubernetes_service(cluster, real_node: RealNode, namespace: str) -> None:
    """KUBERNETES_SERVICE_HOST/PORT from the kubelet lead to this session's API server (an
    HTTP request to its TLS port gets Go's plain-text "HTTPS server" answer), and the
    ServiceAccount admission plugin had the kubelet mount a token, the CA and the namespace.
    The full TLS + token path is tests/argo/test_in_cluster.py (the runtime image)."""
    from tests.node.launcher import KUBERNETES_SERVICE_IP, KUBERNETES_SERVICE_PORT

    core = _core(cluster)
    script = (
        'echo "service=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; '
        "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 10 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT; "
        "echo; ls /var/run/secrets/kubernetes.io/serviceaccount; "
        "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo"
    )
    core.create_namespaced_pod(namespace, _pod(real_node, "api", script))
    assert _wait_pod(core, namespace, "api", _finished).status.phase == "Succeeded"
    log = _log(core, namespace, "api")
    assert f"service={KUBERNETES_SERVICE_IP}:{KUBERNETES_SERVICE_PORT}" in log, log
    assert "Client sent an HTTP request to an HTTPS server" in log, log
    for name in ("ca.crt", "namespace", "token"):
        assert name in log.split(), log
    assert namespace in log.split(), log
    # The mounted CA is this control plane's CA.
    ca = cluster.require_local().pki_dir / "ca.crt"
    mounted = core.read_namespaced_config_map("kube-root-ca.crt", namespace).data["ca.crt"]
    assert mounted.strip() == ca.read_text().strip()


def test_pod_http_server_answers_through_the_service_proxy(cluster, real_node: RealNode, namespace: str) -> None:
    from kubernetes import client

    core = _core(cluster)
    token = uuid.uuid4().hex
    core.create_namespaced_service(namespace, {
        "metadata": {"name": "web"},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080}]},
    })
    script = f"mkdir -p /www && echo page-{token} > /www/index.html && exec httpd -f -p 8080 -h /www"
    core.create_namespaced_pod(namespace, _pod(real_node, "web", script, labels={"app": "web"}))
    _wait_pod(core, namespace, "web", _running_with_ip)
    end, body = time.monotonic() + 60, ""
    while time.monotonic() < end:
        try:
            body = core.connect_get_namespaced_service_proxy_with_path("web:8080", namespace, "index.html")
            if f"page-{token}" in body:
                break
        except client.ApiException as err:  # endpoints not there yet, or httpd not listening
            body = f"{err.status} {err.body}"
        time.sleep(0.5)
    assert f"page-{token}" in body


def test_a_stopped_node_leaves_nothing_behind(cluster, real_node: RealNode, namespace: str, tmp_path: Path) -> None:
    """A second node on the same control plane runs a pod, stops, and leaves no process,
    mount, network namespace, bridge, log link or Node object."""
    plane = cluster.require_local()
    core = _core(cluster)
    node = RealNode(state_dir=tmp_path / "node-b", artifacts=node_build.build(log=lambda m: None),
                    server=plane.server, ca_dir=plane.pki_dir, admin_kubeconfig=plane.kubeconfig,
                    name="vpipe-real-node-b", log=lambda m: None)
    node.state_dir.mkdir()
    node.start()
    try:
        assert node.octet != real_node.octet and node.bridge != real_node.bridge
        body = _pod(node, "pinned", "sleep 600")
        body["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node.name
        core.create_namespaced_pod(namespace, body)
        _wait_pod(core, namespace, "pinned", _running_with_ip)
        netns = node.sandbox_netns()
        assert netns and all(Path(p).exists() for p in netns)
        processes = list(node.processes.values())
        assert {p.name for p in processes} == {"containerd", "coredns", "kubelet", "apiforward"}
        assert node.leftovers(netns)  # sanity: while running, the checks do see things
    finally:
        node.stop()
    assert node.leftovers(netns) == []
    assert not [p.name for p in processes if p.alive()]
    assert node.name not in [n.metadata.name for n in core.list_node().items]
    node.stop()  # a second stop is harmless
    # The session's node is untouched.
    conditions = {c.type: c.status for c in core.read_node(real_node.name).status.conditions}
    assert conditions["Ready"] == "True"


KILLED_SESSION = """
import json, os, sys, time
from pathlib import Path
from kubernetes import client, config
from tests.node import build
from tests.node.launcher import RealNode, pod_placement
server, ca_dir, kubeconfig, state_dir, namespace = sys.argv[1:]
node = RealNode(state_dir=Path(state_dir), artifacts=build.build(log=lambda m: None), server=server,
                ca_dir=Path(ca_dir), admin_kubeconfig=Path(kubeconfig), name="vpipe-real-node-c", log=lambda m: None)
node.start()
core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
pod = {"metadata": {"name": "orphan"}, "spec": {**pod_placement(), "containers": [{"name": "m",
       "image": node.busybox_image, "imagePullPolicy": "Never", "command": ["sleep", "600"]}]}}
pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node.name
core.create_namespaced_pod(namespace, pod)
while core.read_namespaced_pod("orphan", namespace).status.phase != "Running":
    time.sleep(0.2)
print(json.dumps({"octet": node.octet, "netns": node.sandbox_netns()}), flush=True)
os.kill(os.getpid(), 9)  # as a test session killed by a timeout: no finalizer runs
"""


def test_a_node_left_by_a_killed_session_is_removed_at_the_next_start(
    cluster, real_node: RealNode, namespace: str, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    from tests.node.launcher import reap_abandoned_nodes

    plane = cluster.require_local()
    state_dir = tmp_path / "node-c"
    state_dir.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", KILLED_SESSION, plane.server, str(plane.pki_dir), str(plane.kubeconfig),
         str(state_dir), namespace],
        check=False, capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == -9, result.stderr[-3000:]
    info = json.loads(result.stdout.strip().splitlines()[-1])
    node = RealNode.attach(state_dir)
    # The kubelet and containerd died with their session; the pod's container, its mounts
    # and network namespace, the runc shim and the bridge did not.
    end = time.monotonic() + 30
    while any(p.alive() for p in node.processes.values()) and time.monotonic() < end:
        time.sleep(0.2)
    left = node.leftovers(info["netns"])
    assert any(item.startswith("mount ") for item in left) and f"bridge vpipe-br{info['octet']}" in left, left

    reap_abandoned_nodes(lambda m: None)  # what every node start does first

    assert node.leftovers(info["netns"]) == []
    core = _core(cluster)
    assert "vpipe-real-node-c" not in [n.metadata.name for n in core.list_node().items]
