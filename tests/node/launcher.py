"""Start and stop a real Kubernetes node next to the local control plane.

One node runs real containers: containerd (its own root, state, socket and runc root under
the state directory; Debian's package), runc, a CNI bridge on a private /24 that exists
only on this machine, the kubelet (node client certificate signed by the test CA, so the
Node authorizer and NodeRestriction apply to it), and CoreDNS serving ``cluster.local``
from the API server on the bridge's gateway address.

Traffic rule: pods reach each other, CoreDNS and servers on the gateway address, nothing
else. The bridge is made here with the gateway address on it before the first pod; the
CNI bridge plugin attaches pods to it with no masquerade and no default gateway, and
host-local IPAM gives pods only the bridge subnet's route: a packet for any address off
the bridge has no route out of the pod. CoreDNS has no ``forward``.

The node is labelled ``vpipe.dev/real-node=true`` and tainted with the same key
(NoSchedule), so only pods that ask for it (``pod_placement()``) land on it; the kwok nodes
keep serving everything else.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.cluster import build as cluster_build
from tests.cluster.launcher import (
    SERVICE_CIDR,
    Process,
    StartupError,
    _cmdline_of,
    free_port,
    spawn,
    terminate,
    wait_until,
)
from tests.node.build import NodeArtifacts

REAL_NODE_LABEL = "vpipe.dev/real-node"
REAL_NODE_LABEL_VALUE = "true"
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": REAL_NODE_LABEL_VALUE, "effect": "NoSchedule"}
DEFAULT_NODE_NAME = "vpipe-real-node"
CLUSTER_DOMAIN = "cluster.local"
SUBNET_PREFIX = "10.252"  # pods get 10.252.<n>.0/24, <n> picked free at start
BRIDGE_PREFIX = "vpipe-br"  # + <n>; interface names have at most 15 characters
CONTAINERD_NAMESPACE = "k8s.io"  # the namespace containerd's CRI plugin uses
CONTAINER_LOG_LINKS = Path("/var/log/containers")  # fixed in the kubelet
# The device-plugin registration socket: fixed in the kubelet whatever its root dir.
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
COREDNS_ROLE = "vpipe-test:coredns"
# The `kubernetes` Service: the API server gives it the first address of the service range
# and port 443; the kubelet puts both into every pod as KUBERNETES_SERVICE_HOST/PORT.
KUBERNETES_SERVICE_IP = str(ipaddress.ip_network(SERVICE_CIDR)[1])
KUBERNETES_SERVICE_PORT = 443
NFT_TABLE_PREFIX = "vpipe_br"  # + <n>: one nftables table per node, named after its bridge
APIFORWARD = Path(__file__).resolve().parent / "apiforward.py"


def pod_placement() -> dict[str, Any]:
    """Pod spec fields that put a pod on the real node (and only there)."""
    return {
        "nodeSelector": {REAL_NODE_LABEL: REAL_NODE_LABEL_VALUE},
        "tolerations": [{"key": REAL_NODE_LABEL, "operator": "Equal",
                         "value": REAL_NODE_LABEL_VALUE, "effect": "NoSchedule"}],
    }


def _sha256_of(path: Path) -> str:
    """Streamed: image archives can be gigabytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True)


def _used_subnets() -> str:
    return _run("ip", "-4", "route", "show", "table", "all").stdout + _run("ip", "-4", "addr").stdout


def _create_bridge() -> int:
    """Create ``vpipe-br<n>`` with ``10.252.<n>.1/24`` for the first free ``n``; creating
    the link is the lock against a concurrent node start picking the same subnet."""
    for octet in range(1, 255):
        if f"{SUBNET_PREFIX}.{octet}." in _used_subnets():
            continue
        bridge = f"{BRIDGE_PREFIX}{octet}"
        if _run("ip", "link", "add", bridge, "type", "bridge", check=False).returncode != 0:
            continue  # someone else's (or a leftover): try the next one
        _run("ip", "addr", "add", f"{SUBNET_PREFIX}.{octet}.1/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        return octet
    raise StartupError(f"no free /24 in {SUBNET_PREFIX}.0.0/16 for the test bridge")


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below ``directory`` (from /proc/self/mountinfo), deepest first."""
    prefix = str(directory.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains ``text`` (our socket or state path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and text in _cmdline_of(int(entry.name)):
            pids.append(int(entry.name))
    return pids


def _alive(pid: object) -> bool:
    """Whether ``pid`` names a running process other than this one."""
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _kubelet_start_turn() -> Iterator[None]:
    """One kubelet at a time from its start until it listens on DEVICE_PLUGIN_SOCKET.

    Every kubelet empties that fixed directory and then listens on the socket: two started
    at once (scripts/test starts three real nodes side by side) can both empty it and the
    second's listen fails with 'address already in use', which ended a CI run's node
    process (12 errors). One that starts after another listens removes the file and
    listens on its own; the first keeps its open socket (no device plugin is used here)."""
    lock_path = cluster_build.cache_root() / "kubelet-start.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _listening_since(path: Path, since: float) -> bool:
    """Whether a socket file at `path` was made at or after `since` (seconds since epoch)."""
    try:
        return path.is_socket() and path.stat().st_mtime >= since
    except OSError:
        return False


def _claim_path(bridge: str) -> Path:
    """Where a running node records its state dir, keyed by its bridge: a later start
    finds nodes whose processes died with a killed test session and removes them."""
    claims = cluster_build.cache_root() / "node-claims"
    claims.mkdir(parents=True, exist_ok=True)
    return claims / f"{bridge}.json"


def reap_abandoned_nodes(log: Callable[[str], None]) -> None:
    """Stop nodes whose kubelet and containerd are gone (their test session was killed:
    both die with it) but whose containers, mounts or bridge may still be there."""
    for claim in sorted(_claim_path("x").parent.glob(f"{BRIDGE_PREFIX}*.json")):
        record = json.loads(claim.read_text())
        if _alive(record.get("pid")):
            # Its session still runs (scripts/test starts nodes in pytest processes side by
            # side): between writing the claim and starting containerd it has no process yet.
            continue
        state_dir = Path(record["state_dir"])
        if (state_dir / "state.json").exists():
            node = RealNode.attach(state_dir, log=log)
            if any(p.alive() for p in node.processes.values()):
                continue  # running (e.g. `up --real-node`, or another session's node)
        else:
            octet = int(claim.stem.removeprefix(BRIDGE_PREFIX))
            node = RealNode(state_dir=state_dir, artifacts=NodeArtifacts(state_dir), server="",
                            ca_dir=state_dir, admin_kubeconfig=state_dir / "none", log=log, octet=octet)
        log(f"real node: cleaning up an abandoned node in {state_dir}")
        node.stop()
        claim.unlink(missing_ok=True)


@dataclass
class RealNode:
    """A kubelet + containerd + CNI bridge + CoreDNS joined to a control plane.

    ``server``, ``ca_dir`` (holding ``ca.crt`` and ``ca.key``) and ``admin_kubeconfig``
    come from the control plane (``ControlPlane.server``, ``.pki_dir``, ``.kubeconfig``).
    """

    state_dir: Path
    artifacts: NodeArtifacts
    server: str
    ca_dir: Path
    admin_kubeconfig: Path
    name: str = DEFAULT_NODE_NAME
    detach: bool = False
    log: Callable[[str], None] = print
    octet: int = 0
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)
    imported: dict[str, str] = field(default_factory=dict)  # archive sha256 -> path
    start_seconds: float = 0.0

    # ----- names ---------------------------------------------------------------------

    label = REAL_NODE_LABEL  # pods select the node with {label: label_value} ...
    label_value = REAL_NODE_LABEL_VALUE
    taint = REAL_NODE_TAINT  # ... and tolerate this taint: pod_placement() gives both

    @staticmethod
    def placement() -> dict[str, Any]:
        return pod_placement()

    @property
    def bridge(self) -> str:
        return f"{BRIDGE_PREFIX}{self.octet}"

    @property
    def gateway_ip(self) -> str:
        """The host's address on the pod bridge: CoreDNS, the kubelet and test servers
        listen here; pods reach nothing else outside their bridge."""
        return f"{SUBNET_PREFIX}.{self.octet}.1"

    @property
    def subnet(self) -> str:
        return f"{SUBNET_PREFIX}.{self.octet}.0/24"

    @property
    def nft_table(self) -> str:
        return f"{NFT_TABLE_PREFIX}{self.octet}"

    @property
    def network_name(self) -> str:
        return f"vpipe-test-{self.octet}"

    @property
    def containerd_socket(self) -> Path:
        return self.state_dir / "containerd" / "containerd.sock"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pod_logs_dir(self) -> Path:
        return self.state_dir / "pod-logs"

    @property
    def busybox_image(self) -> str:
        return self.artifacts.image_name("busybox")

    @property
    def pause_image(self) -> str:
        return self.artifacts.image_name("pause")

    def _path(self, *parts: str) -> Path:
        return self.state_dir.joinpath(*parts)

    # ----- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> RealNode:
        started = time.monotonic()
        reap_abandoned_nodes(self.log)
        try:
            self._prepare()
            self.octet = _create_bridge()
            self._write_state()  # from here on `down` in another process can clean up
            _claim_path(self.bridge).write_text(json.dumps({"state_dir": str(self.state_dir), "pid": os.getpid()}) + "\n")
            self._make_certs()
            self._write_kubeconfigs()
            self._grant_coredns()
            self._write_cni_config()
            self._start_apiforward()
            self._install_nat()
            self._start_containerd()
            self._wait(self._containerd_ready, "containerd", 60)
            self.import_image(self.artifacts.image_archive("pause"))
            self.import_image(self.artifacts.image_archive("busybox"))
            self._start_coredns()
            self._start_kubelet()
            end = started + timeout
            self._wait(self._coredns_ready, "CoreDNS ready", max(5.0, end - time.monotonic()))
            self._wait(self._apiforward_ready, "API forwarder", max(5.0, end - time.monotonic()))
            self._wait(self._node_ready, f"node {self.name} Ready", max(5.0, end - time.monotonic()))
        except BaseException:
            self.log(f"real node failed to start; logs in {self.logs_dir}")
            self.stop()
            raise
        self.start_seconds = round(time.monotonic() - started, 1)
        self._write_state()
        self.log(f"real node {self.name} ready in {self.start_seconds}s (bridge {self.bridge}, "
                 f"gateway {self.gateway_ip})")
        return self

    def stop(self) -> None:
        """Stop everything this node started and remove what it made on the host: pods
        (their containers, mounts and network namespaces), the kubelet, containerd and
        its shims, CoreDNS, the bridge, the Node object. Safe to call more than once."""
        if self.processes.get("kubelet") and self.processes["kubelet"].alive():
            self._drain_pods()
        for name in ("kubelet", "coredns", "apiforward"):
            if name in self.processes:
                terminate(self.processes[name])
        netns = self.sandbox_netns() if self._containerd_ready() else []
        self._remove_containers()
        if "containerd" in self.processes:
            terminate(self.processes["containerd"], grace=15)
        for pid in processes_mentioning(str(self.containerd_socket)):
            # runc shims outlive containerd by design; ours name our socket.
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        self._remove_runc_containers()  # only left when containerd died before us (a crash)
        for point in mounts_under(self.state_dir):
            _run("umount", "-l", point, check=False)
        pinned = self._path("containerd", "state", "io.containerd.grpc.v1.cri", "netns")
        for path in [*netns, *(pinned.iterdir() if pinned.is_dir() else [])]:
            if Path(path).exists():  # unmounted above, or never was: only the file is left
                _run("umount", str(path), check=False)
                Path(path).unlink(missing_ok=True)
        for link in self._log_links():
            link.unlink(missing_ok=True)
        if self.octet:
            _run("nft", "delete", "table", "ip", self.nft_table, check=False)
            _run("ip", "link", "del", self.bridge, check=False)
        self._delete_node_object()
        self.processes.clear()
        (self.state_dir / "state.json").unlink(missing_ok=True)
        if self.octet:
            _claim_path(self.bridge).unlink(missing_ok=True)

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- images ------------------------------------------------------------------------

    def import_image(self, archive: Path) -> str:
        """Import an image archive (docker-archive or OCI tar, e.g. from ``podman save``)
        into the node's containerd; idempotent, skipped when this archive's content was
        already imported. Returns the archive's sha256."""
        digest = _sha256_of(Path(archive))
        if digest in self.imported:
            return digest
        self._ctr("images", "import", str(archive))
        self.imported[digest] = str(archive)
        self._write_state()
        return digest

    def images(self) -> list[str]:
        return self._ctr("images", "ls", "-q").stdout.split()

    # ----- what is left (for teardown tests) -----------------------------------------------

    def sandbox_netns(self) -> list[str]:
        """Network namespace paths of the pod sandboxes containerd has."""
        paths = []
        for cid in self._ctr("containers", "ls", "-q", check=False).stdout.split():
            out = self._ctr("containers", "info", cid, check=False).stdout
            try:
                spec = json.loads(out).get("Spec") or {}
            except json.JSONDecodeError:
                continue
            for ns in (spec.get("linux") or {}).get("namespaces") or []:
                # Sandboxes name their pinned netns; app containers join it by /proc/<pid>.
                if ns.get("type") == "network" and ns.get("path") and not ns["path"].startswith("/proc/"):
                    paths.append(ns["path"])
        return sorted(set(paths))

    def leftovers(self, netns: list[str] = ()) -> list[str]:
        """What of this node still exists on the host (empty after a clean stop):
        processes naming our state dir or socket, mounts under the state dir, the bridge,
        the given network namespaces, container log links into our log dir."""
        found = [f"process {pid}: {_cmdline_of(pid)[:120]}"
                 for pid in sorted(set(processes_mentioning(str(self.state_dir))))]
        found += [f"mount {point}" for point in mounts_under(self.state_dir)]
        if self.octet and _run("ip", "link", "show", self.bridge, check=False).returncode == 0:
            found.append(f"bridge {self.bridge}")
        if self.octet and _run("nft", "list", "table", "ip", self.nft_table, check=False).returncode == 0:
            found.append(f"nftables table ip {self.nft_table}")
        found += [f"netns {path}" for path in netns if Path(path).exists()]
        found += [f"log link {link}" for link in self._log_links()]
        return found

    # ----- steps ---------------------------------------------------------------------------

    def _prepare(self) -> None:
        for sub in ("pki", "logs", "containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "coredns"):
            self._path(sub).mkdir(parents=True, exist_ok=True)
        for name in ("kubelet", "kubelet-healthz", "coredns-health", "coredns-ready", "apiforward"):
            self.ports[name] = free_port()

    def _make_certs(self) -> None:
        """Client and serving certificates signed by the control plane's test CA."""
        ca_crt, ca_key = self.ca_dir / "ca.crt", self.ca_dir / "ca.key"
        specs = [
            ("kubelet-client", f"/O=system:nodes/CN=system:node:{self.name}", "extendedKeyUsage=clientAuth"),
            ("kubelet-serving", f"/O=system:nodes/CN=system:node:{self.name}",
             f"subjectAltName=IP:{self.gateway_ip},DNS:{self.name}\nextendedKeyUsage=serverAuth"),
            ("coredns", "/CN=vpipe-test-coredns", "extendedKeyUsage=clientAuth"),
        ]
        pki = self._path("pki")
        for name, subject, ext in specs:
            key, csr, crt, extfile = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
            extfile.write_text(ext + "\n")
            _run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", str(key), "-out", str(csr), "-subj", subject)
            _run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-CAserial", str(pki / "ca.srl"), "-days", "3650",
                 "-extfile", str(extfile), "-out", str(crt))

    def _kubeconfig(self, user: str) -> dict:
        pki = self._path("pki")
        return {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_dir / "ca.crt")}}],
            "users": [{"name": user, "user": {"client-certificate": str(pki / f"{user}.crt"),
                                              "client-key": str(pki / f"{user}.key")}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
            "current-context": "local",
        }

    def _write_kubeconfigs(self) -> None:
        for user in ("kubelet-client", "coredns"):
            self._path(f"{user}.kubeconfig").write_text(yaml.safe_dump(self._kubeconfig(user)))

    def _admin_api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.admin_kubeconfig))

    def _grant_coredns(self) -> None:
        """CoreDNS's kubernetes plugin reads Services, EndpointSlices and Namespaces;
        its certificate's user gets exactly that."""
        from kubernetes import client

        rbac = client.RbacAuthorizationV1Api(self._admin_api())
        role = {"metadata": {"name": COREDNS_ROLE}, "rules": [
            {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ]}
        binding = {"metadata": {"name": COREDNS_ROLE},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COREDNS_ROLE},
                   "subjects": [{"kind": "User", "name": "vpipe-test-coredns",
                                 "apiGroup": "rbac.authorization.k8s.io"}]}
        for create, replace, body in ((rbac.create_cluster_role, rbac.replace_cluster_role, role),
                                      (rbac.create_cluster_role_binding, rbac.replace_cluster_role_binding, binding)):
            try:
                create(body)
            except client.ApiException as err:
                if err.status != 409:
                    raise
                replace(COREDNS_ROLE, body)

    def _write_cni_config(self) -> None:
        config = {
            "cniVersion": "0.4.0",
            "name": self.network_name,
            "plugins": [{
                "type": "bridge",
                "bridge": self.bridge,
                # The bridge and its gateway address exist before the first pod
                # (_create_bridge), so CoreDNS and the kubelet can bind to it at start.
                "isGateway": True,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": self.subnet, "gateway": self.gateway_ip}]],
                    "dataDir": str(self._path("cni", "ipam")),
                    # No default route: pods get the bridge subnet and one host route, to
                    # the `kubernetes` Service's address via the gateway (_install_nat).
                    "routes": [{"dst": f"{KUBERNETES_SERVICE_IP}/32"}],
                },
            }],
        }
        self._path("cni", "net.d", "10-vpipe-test.conflist").write_text(json.dumps(config, indent=2) + "\n")

    def _start_apiforward(self) -> None:
        """The API server listens on loopback only; this forwarder listens on the gateway
        address (which only this machine and this node's pods can reach)."""
        api_port = int(self.server.rsplit(":", 1)[1])
        self._spawn("apiforward", [sys.executable, str(APIFORWARD), f"{self.gateway_ip}:{self.ports['apiforward']}",
                                   f"127.0.0.1:{api_port}"])

    def _apiforward_ready(self) -> bool:
        import socket

        with socket.create_connection((self.gateway_ip, self.ports["apiforward"]), timeout=2):
            return True

    def nat_rules(self) -> str:
        """This node's nftables table: what a kube-proxy would do for the one Service pods
        need, for packets from this node's bridge only (two nodes on one machine each DNAT
        the same ClusterIP to their own control plane), and a guard that nothing from the
        bridge is forwarded off it (the host may have IP forwarding on; pods have a route
        to the ClusterIP only, and only its API port is answered)."""
        service = f"ip daddr {KUBERNETES_SERVICE_IP} tcp dport {KUBERNETES_SERVICE_PORT}"
        return f"""table ip {self.nft_table} {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        iifname "{self.bridge}" {service} dnat to {self.gateway_ip}:{self.ports['apiforward']}
    }}
    chain forward {{
        type filter hook forward priority filter; policy accept;
        iifname "{self.bridge}" oifname != "{self.bridge}" drop
    }}
}}
"""

    def _install_nat(self) -> None:
        _run("nft", "delete", "table", "ip", self.nft_table, check=False)  # a leftover of a crash
        result = subprocess.run(["nft", "-f", "-"], input=self.nat_rules(), capture_output=True, text=True)
        if result.returncode != 0:
            raise StartupError(f"nft could not load the node's table: {result.stderr.strip()}")

    def _containerd_config(self) -> str:
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        c = self._path("containerd")
        return f"""\
version = 2
root = "{c / 'root'}"
state = "{c / 'state'}"
# /opt/containerd and the snapshotters this node does not use stay untouched.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[{cri}]
  sandbox_image = "{self.pause_image}"
  # The kubelet asks for a negative OOM score for the sandbox, which this machine
  # forbids; without this every sandbox fails ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # Pod network namespaces are pinned under our state dir, not in the host's /var/run/netns.
  netns_mounts_under_state_dir = true
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{shutil.which('runc') or 'runc'}"
  Root = "{c / 'runc'}"
[{cri}.cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{self._path('cni', 'net.d')}"
  max_conf_num = 1
"""

    def _start_containerd(self) -> None:
        config = self._path("containerd", "config.toml")
        config.write_text(self._containerd_config())
        self._spawn("containerd", ["containerd", "--config", str(config), "--log-level", "info"])

    def _ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = _run("ctr", "--address", str(self.containerd_socket), "--namespace",
                      CONTAINERD_NAMESPACE, *args, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def _containerd_ready(self) -> bool:
        return self.containerd_socket.exists() and self._ctr("version", check=False).returncode == 0

    def _start_coredns(self) -> None:
        corefile = self._path("coredns", "Corefile")
        corefile.write_text(f"""\
{CLUSTER_DOMAIN}:53 {{
    bind {self.gateway_ip}
    health 127.0.0.1:{self.ports['coredns-health']}
    ready 127.0.0.1:{self.ports['coredns-ready']}
    errors
    log
    cache 5
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {self._path('coredns.kubeconfig')} local
        ttl 5
    }}
}}
""")
        self._spawn("coredns", [str(self.artifacts.binary("coredns")), "-conf", str(corefile)])

    def _coredns_ready(self) -> bool:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['coredns-ready']}/ready", timeout=5) as resp:
            return resp.status == 200

    def _kubelet_config(self) -> dict:
        pki = self._path("pki")
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # What this machine needs (a cgroup v1/v2 hybrid, swap, no systemd in charge).
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            # kubelet 1.34 panics (nil pointer in doPodResizeAction) when it decides to resize a
            # pod while cgroupsPerQOS is off, which happened here once when a container started
            # before its actuated-resources record was written ("Missing actuated resource
            # record"); the node was gone for every later test. No test resizes a pod in place.
            "featureGates": {"InPlacePodVerticalScaling": False},
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "evictionHard": {},
            # Our images are imported, never pulled: never garbage-collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "address": self.gateway_ip,
            "port": self.ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.ports["kubelet-healthz"],
            "tlsCertFile": str(pki / "kubelet-serving.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
            # Only holders of a test-CA certificate (the API server) may call the kubelet.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.ca_dir / "ca.crt")}},
            "authorization": {"mode": "AlwaysAllow"},
            "clusterDNS": [self.gateway_ip],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": "",  # no search domains or servers of the host in pods
            "podLogsDir": str(self.pod_logs_dir),
            "registerWithTaints": [REAL_NODE_TAINT],
            "maxPods": 50,
        }

    def _start_kubelet(self) -> None:
        config = self._path("kubelet-config.yaml")
        config.write_text(yaml.safe_dump(self._kubelet_config()))
        with _kubelet_start_turn():
            spawned = time.time()
            self._spawn_kubelet(config)
            # Hold the turn until this kubelet listens on the shared socket (or exits: the
            # wait then fails with its log).
            self._wait(lambda: _listening_since(DEVICE_PLUGIN_SOCKET, spawned),
                       "the kubelet's device-plugin socket", 120)

    def _spawn_kubelet(self, config: Path) -> None:
        self._spawn("kubelet", [
            str(self.artifacts.binary("kubelet")),
            f"--config={config}",
            f"--kubeconfig={self._path('kubelet-client.kubeconfig')}",
            f"--root-dir={self._path('kubelet')}",
            f"--hostname-override={self.name}",
            f"--node-ip={self.gateway_ip}",
            f"--node-labels={REAL_NODE_LABEL}={REAL_NODE_LABEL_VALUE}",
            "--v=1",
        ])

    def restart_kubelet(self, timeout: float = 120.0) -> float:
        """Stop the kubelet (SIGTERM, as `systemctl restart kubelet` does) and start it again
        with the same configuration and state directory while pods run: their containers stay
        with containerd meanwhile. Returns the seconds until the new kubelet's health check
        answered. Call it from a thread that lives as long as the node: the kubelet gets its
        parent's death signal (PR_SET_PDEATHSIG) when the thread that started it ends."""
        started = time.monotonic()
        terminate(self.processes["kubelet"])
        self._start_kubelet()
        self._write_state()
        self._wait(self._kubelet_healthy, "the restarted kubelet healthy", timeout)
        return time.monotonic() - started

    def _kubelet_healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['kubelet-healthz']}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def _node_ready(self) -> bool:
        from kubernetes import client

        node = client.CoreV1Api(self._admin_api()).read_node(self.name)
        conditions = {c.type: c.status for c in (node.status.conditions or [])}
        return conditions.get("Ready") == "True"

    # ----- teardown helpers --------------------------------------------------------------

    def _drain_pods(self, timeout: float = 60.0) -> None:
        """Cordon the node and delete its pods through the API, so that the kubelet stops
        them the normal way (CNI DEL, network namespace removed, mounts released)."""
        from kubernetes import client

        try:
            core = client.CoreV1Api(self._admin_api())
            core.patch_node(self.name, {"spec": {"unschedulable": True}})
            pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.name}").items
            for pod in pods:
                try:
                    core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=1)
                except client.ApiException as err:
                    if err.status != 404:
                        raise
        except Exception as err:  # noqa: BLE001 - the control plane may be gone: force below
            self.log(f"real node: could not drain through the API ({err}); removing containers directly")
            return
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self._ctr("tasks", "ls", "-q", check=False).stdout.split():
                return
            time.sleep(0.5)
        self.log("real node: pods still running after the drain; removing them directly")

    def _remove_containers(self) -> None:
        """Kill and delete whatever containers containerd still has (the kubelet is gone)."""
        if not self._containerd_ready():
            return
        for task in self._ctr("tasks", "ls", "-q", check=False).stdout.split():
            self._ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
        for task in self._ctr("tasks", "ls", "-q", check=False).stdout.split():
            for _ in range(50):
                if self._ctr("tasks", "delete", task, check=False).returncode == 0:
                    break
                time.sleep(0.1)
        for cid in self._ctr("containers", "ls", "-q", check=False).stdout.split():
            self._ctr("containers", "delete", cid, check=False)

    def _remove_runc_containers(self) -> None:
        """Kill and delete containers straight through runc (its state is under our
        state dir): what a crashed containerd could no longer stop."""
        root = self._path("containerd", "runc", CONTAINERD_NAMESPACE)
        if not root.is_dir():
            return
        runc = shutil.which("runc") or "runc"
        for container in root.iterdir():
            _run(runc, "--root", str(root), "delete", "--force", container.name, check=False)

    def _log_links(self) -> list[Path]:
        if not CONTAINER_LOG_LINKS.is_dir():
            return []
        prefix = str(self.pod_logs_dir)
        return [p for p in CONTAINER_LOG_LINKS.iterdir()
                if p.is_symlink() and os.readlink(p).startswith(prefix)]

    def _delete_node_object(self) -> None:
        from kubernetes import client

        try:
            client.CoreV1Api(self._admin_api()).delete_node(self.name)
        except Exception:  # noqa: BLE001 - gone already, or the control plane is down
            pass

    # ----- processes and state --------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> None:
        self.processes[name] = spawn(name, args, self.logs_dir, self.detach)

    def _wait(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        wait_until(check, what, timeout, self.processes.values(), self.logs_dir)

    def _write_state(self) -> None:
        state = {
            "name": self.name, "server": self.server, "ca_dir": str(self.ca_dir),
            "admin_kubeconfig": str(self.admin_kubeconfig), "artifacts": str(self.artifacts.directory),
            "octet": self.octet, "ports": self.ports, "imported": self.imported,
            "processes": {p.name: {"pid": p.pid, "args": p.args, "log": str(p.log_path)}
                          for p in self.processes.values()},
        }
        (self.state_dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def attach(cls, state_dir: Path, log: Callable[[str], None] = print) -> RealNode:
        """A handle on a node started by another process (`up --real-node`), for `down`."""
        state = json.loads((state_dir / "state.json").read_text())
        node = cls(state_dir=state_dir, artifacts=NodeArtifacts(Path(state["artifacts"])),
                   server=state["server"], ca_dir=Path(state["ca_dir"]),
                   admin_kubeconfig=Path(state["admin_kubeconfig"]), name=state["name"],
                   detach=True, log=log, octet=state["octet"], ports=state["ports"],
                   imported=state["imported"])
        for name, info in state["processes"].items():
            node.processes[name] = Process(name, info["args"], Path(info["log"]), None, info["pid"])
        return node

