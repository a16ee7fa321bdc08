"""What the in-cluster tests share: the shipped manifests applied to a test namespace, a code
server on the node's bridge, the API requests a ServiceAccount made (from the audit log), and
the CPU and memory of a step's process seen from the host."""

from __future__ import annotations

import os
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.http_server import serve
from tests.helpers.rbac import Access, audited, delete_cluster_scoped  # noqa: F401 - the Argo tests clean up with it

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"

# A training program that does nothing but follow the entry-point contract: the worker
# "trains" for a few seconds and exits 0; the parameter server never ends (server.join()).
TINY_RUN_SH = """#!/bin/bash
echo "$VPIPE_ROLE $VK_TASK_INDEX: $*"
if [ "$VPIPE_ROLE" = ps ]; then exec sleep infinity; fi
sleep "${TINY_WORK_SECONDS:-5}"
echo "$VPIPE_ROLE $VK_TASK_INDEX: done"
"""


def load(*relative: str) -> list[dict[str, Any]]:
    """The objects of manifests files (paths relative to the repository)."""
    objects = []
    for name in relative:
        objects += [doc for doc in yaml.safe_load_all((REPO / name).read_text()) if doc]
    return objects


def base_objects(namespace: str) -> list[dict[str, Any]]:
    """manifests/base + manifests/argo's Role for `namespace` (cluster-scoped objects renamed
    per namespace, as tests/integration/test_rbac.py does)."""
    from tests.helpers.rbac import manifests

    objects = manifests(namespace, exclude=())
    for obj in load("manifests/argo/role-argo-executor.yaml"):
        obj["metadata"]["namespace"] = namespace
        objects.append(obj)
    return objects


def apply_objects(api: Any, namespace: str, objects: list[dict[str, Any]]) -> None:
    """Create each object (namespaced ones in `namespace`) through the dynamic client."""
    from kubernetes import dynamic

    dyn = dynamic.DynamicClient(api)
    for obj in objects:
        for subject in obj.get("subjects", []):
            if subject.get("kind") == "ServiceAccount" and subject.get("namespace", "default") == "default":
                subject["namespace"] = namespace  # as kustomize's namespace transformer does
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        if resource.namespaced:
            obj.setdefault("metadata", {})["namespace"] = namespace
            resource.create(body=obj, namespace=namespace)
        else:
            resource.create(body=obj)


@contextmanager
def code_server(gateway_ip: str, root: Path) -> Iterator[str]:
    """`root` over HTTP on the bridge's gateway address (what pods reach)."""
    with serve(root, host=gateway_ip) as server:
        yield server.base


def tiny_code(root: Path) -> Path:
    (root / "tiny").mkdir(parents=True, exist_ok=True)
    (root / "tiny" / "run.sh").write_text(TINY_RUN_SH)
    return root


def service_account_accesses(audit_log: Path, namespace: str, name: str) -> tuple[list[Access], set[Access]]:
    """(refused, allowed) API accesses of a ServiceAccount, from the audit log."""
    seen = audited(audit_log, f"system:serviceaccount:{namespace}:{name}")
    refused = sorted(a for a, decisions in seen.items() if "allow" not in decisions)
    allowed = {a for a, decisions in seen.items() if "allow" in decisions}
    return refused, allowed


@dataclass
class Usage:
    cpu_seconds: float
    rss_bytes: int


def process_usage(marker: str) -> Usage | None:
    """CPU time and resident memory, summed over the host's processes whose command line
    contains `marker` (a container's processes are ordinary processes of the host)."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu, rss, found = 0.0, 0, False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker not in cmdline or int(entry.name) == os.getpid():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            status = (entry / "status").read_text()
        except OSError:
            continue
        found = True
        cpu += (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1]) * 1024
    return Usage(cpu, rss) if found else None


def sample_while(marker: str, seconds: float) -> tuple[Usage, Usage, float] | None:
    """Two samples `seconds` apart: (first, second, wall seconds between them)."""
    first = process_usage(marker)
    if first is None:
        return None
    t0 = time.monotonic()
    time.sleep(seconds)
    second = process_usage(marker)
    if second is None:
        return None
    return first, second, time.monotonic() - t0


def external_name(api: Any, namespace: str, name: str, address: str, port: int) -> None:
    """`name` resolves to `address` for the namespace's pods (CoreDNS): a headless Service
    without a selector and its EndpointSlice, as a cluster names a service outside it."""
    from kubernetes import client

    client.CoreV1Api(api).create_namespaced_service(namespace, {
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "ports": [{"name": "tcp", "port": port}]},
    })
    client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(namespace, {
        "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "tcp", "port": port, "protocol": "TCP"}],
    })


def service_endpoint(api: Any, namespace: str, service: str, port_name: str) -> tuple[str, int] | None:
    """A ready endpoint (pod address, target port) of a Service, from its EndpointSlices."""
    from kubernetes import client

    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}").items
    for piece in slices:
        port = next((p.port for p in piece.ports or [] if p.name == port_name), None)
        for endpoint in piece.endpoints or []:
            if port and endpoint.addresses and (endpoint.conditions is None or endpoint.conditions.ready):
                return endpoint.addresses[0], int(port)
    return None


@contextmanager
def service_forwarder(api: Any, namespace: str, service: str, port_name: str, host: str) -> Iterator[str]:
    """http://HOST:PORT forwarding each connection to a ready endpoint of `service`, looked up
    when the connection comes: what kube-proxy's userspace mode did. The test node has no
    kube-proxy (only the `kubernetes` Service's address is routed), so a step pod reaches a
    Service it created through this address instead of the ClusterIP."""

    def pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            try:
                target.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            endpoint = service_endpoint(api, namespace, service, port_name)
            if endpoint is None:
                return  # no ready endpoint: connection closed, as with a Service without endpoints
            try:
                upstream = socket.create_connection(endpoint, timeout=10)
            except OSError:
                return
            with upstream:
                back = threading.Thread(target=pipe, args=(upstream, self.request), daemon=True)
                back.start()
                pipe(self.request, upstream)
                back.join(timeout=30)

    server = socketserver.ThreadingTCPServer((host, 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)  # shutdown waits one poll
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def parse_time(text: str) -> float:
    """An RFC 3339 time as Kubernetes and Argo write it, in seconds since the epoch."""
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
