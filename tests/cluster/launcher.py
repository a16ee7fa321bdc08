"""Start and stop a local Kubernetes + Volcano + kwok control plane from prebuilt binaries.

Processes: etcd, kube-apiserver (RBAC, TLS with generated certificates, audit log),
kube-controller-manager, kube-scheduler, Volcano controller-manager and scheduler, kwok.
Volcano's CRDs come from the Go module cache; fake nodes are plain Node objects that kwok
keeps Ready. Everything runs as the current user on 127.0.0.1 with free ports, and all
state (certificates, etcd data, logs, kubeconfig) lives in one state directory.

Used by the pytest fixture (``tests/cluster/fixtures.py``) and by hand through
``python -m tests.cluster up|down|status``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable

import yaml
from volcano_pipelines.localjob.ports import free_port

from tests.cluster import behaviour, build

STAGES_DIR = Path(__file__).resolve().parent / "stages"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_NODE_LABEL = "type"  # value "kwok"; lets tests select fake nodes
SERVICE_CIDR = "10.0.0.0/24"
VOLCANO_CONTROLLERS = "job-controller,pg-controller,queue-controller,gc-controller"

# Volcano's stock scheduler configuration (gang scheduling, DRF, proportion queues,
# predicates so capacity such as nvidia.com/gpu is honoured).
# kwok serves the log of every container of a pod in one namespace from one file
# (behaviour.LOGS_NAMESPACE, ControlPlane.task_log); kwok's Logs API, v0.8.0.
KWOK_LOGS_CONFIG = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: vpipe-task-log
spec:
  selector:
    matchNamespaces: [{namespace}]
  logs:
  - logsFile: {file}
    follow: false
"""

VOLCANO_SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""

# Audit every request at Metadata level: the benchmark and the resilience tests count a
# client's requests by user agent, which apiserver_request_total cannot do.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
"""


@dataclass(frozen=True)
class NodeShape:
    """Capacity of each fake node. The defaults keep gang scheduling meaningful: a job
    asking for more than 8 GPUs in total can never fit on the default 4 nodes."""

    count: int = 4
    cpu: str = "8"
    memory: str = "32Gi"
    gpus: int = 2
    pods: int = 110


def _set_parent_death_signal() -> None:
    # Runs in the child between fork and exec: if the launching Python process dies
    # (even by SIGKILL), the kernel sends SIGTERM to the child, so no stray control
    # plane outlives a crashed test session.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Process:
    name: str
    args: list[str]
    log_path: Path
    popen: subprocess.Popen | None = None
    pid: int | None = None  # also set when re-attached from a state file (no Popen)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return _cmdline_of(self.pid).startswith(self.args[0])


def _cmdline_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def spawn(name: str, args: list[str], log_dir: Path, detach: bool, env: dict[str, str] | None = None) -> Process:
    """Start ``args`` in its own session, output to ``log_dir/<name>.log``. Unless
    ``detach``, the process gets SIGTERM when the launching Python process dies."""
    log_path = log_dir / f"{name}.log"
    log_file = open(log_path, "ab")  # noqa: SIM115 - the child inherits it; closed below once it has
    popen = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # own process group: terminate() can signal the whole group
        preexec_fn=None if detach else _set_parent_death_signal,
    )
    log_file.close()
    return Process(name, args, log_path, popen, popen.pid)


def terminate(process: Process, grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds, reap it."""
    if process.pid is None or not process.alive():
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + grace
    while time.monotonic() < end and process.alive():
        time.sleep(0.1)
    if process.alive():
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if process.popen is not None:
        try:
            process.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class StartupError(RuntimeError):
    pass


@dataclass
class ControlPlane:
    state_dir: Path
    bin_dir: Path
    # Binaries from elsewhere than bin_dir, by name (the scale benchmark's patched Volcano controller).
    binaries: dict[str, Path] = field(default_factory=dict)
    nodes: NodeShape = field(default_factory=NodeShape)
    # Extra flags for Volcano's controller (the scale benchmark raises its API rates).
    volcano_controller_args: tuple[str, ...] = ()
    detach: bool = False  # True for `up`: processes must outlive the launching command
    log: Callable[[str], None] = print
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)

    # ----- paths -----------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "logs" / "audit.log"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def task_log(self) -> Path:
        """The log of every container of a pod in behaviour.LOGS_NAMESPACE (kwok serves it)."""
        return self.state_dir / "kwok-logs" / "task.log"

    @property
    def pki_dir(self) -> Path:
        """The test CA (ca.crt, ca.key) and the certificates signed by it."""
        return self.state_dir / "pki"

    def _pki(self, name: str) -> Path:
        return self.pki_dir / name

    # ----- lifecycle ---------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> ControlPlane:
        """Start everything and wait until it is usable; on failure stop what started."""
        started = time.monotonic()
        try:
            self._prepare()
            self._start_etcd()
            self._wait(lambda: self._http_ok(f"http://127.0.0.1:{self.ports['etcd']}/health"), "etcd", 30)
            self._start_apiserver()
            self._wait(self._apiserver_ready, "kube-apiserver", 90)
            self._install_crds()
            self._start_controllers()
            self._create_nodes()
            self._wait_healthy(deadline=started + timeout)
        except BaseException:
            self.log(f"control plane failed to start; logs in {self.state_dir / 'logs'}")
            self.stop()
            raise
        self._write_state()
        self.log(f"control plane ready in {time.monotonic() - started:.1f}s: {self.kubeconfig}")
        return self

    def stop(self) -> None:
        """Stop every process this control plane started, newest first."""
        for process in reversed(list(self.processes.values())):
            self._terminate(process)
        self.processes.clear()
        state = self.state_dir / "state.json"
        if state.exists():
            state.unlink()

    def restart_apiserver(self, downtime: float = 0.0) -> None:
        """Stop kube-apiserver, optionally stay down ``downtime`` seconds, start it again
        on the same port with the same flags (watch clients must reconnect)."""
        process = self.processes.pop("kube-apiserver")
        self._terminate(process)
        time.sleep(downtime)
        self._spawn("kube-apiserver", process.args)
        self._wait(self._apiserver_ready, "kube-apiserver (restart)", 90)
        self._write_state()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- steps -------------------------------------------------------------------

    def _prepare(self) -> None:
        for sub in ("pki", "logs", "etcd", "kcm-certs", "scheduler-certs", "apiserver-certs"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        for name in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "vc-cm-health",
                     "vc-cm-metrics", "vc-sched-health", "vc-sched-metrics", "kwok"):
            self.ports[name] = free_port()
        self._make_certs()
        self._write_kubeconfig()
        (self.state_dir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        (self.state_dir / "volcano-scheduler.conf").write_text(VOLCANO_SCHEDULER_CONF)

    def _make_certs(self) -> None:
        """A CA, an apiserver serving cert, an admin client cert (system:masters) and the
        service-account signing key, made with the openssl command line tool."""
        pki = self._pki

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True)

        if pki("admin.crt").exists():
            if not pki("kwok.crt").exists():  # a state directory from before kwok served logs
                self._make_kwok_cert(openssl)
            return

        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        openssl("req", "-x509", *ec, "-keyout", str(pki("ca.key")), "-out", str(pki("ca.crt")),
                "-days", "3650", "-subj", "/CN=volcano-pipelines-test-ca")
        for name, subject, ext in (
            ("apiserver", "/CN=kube-apiserver",
             "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
             "DNS:kubernetes.default,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth"),
            ("admin", "/O=system:masters/CN=vpipe-test-admin", "extendedKeyUsage=clientAuth"),
            # The API server's identity towards kubelets (pods/log, exec, service proxy to
            # a real node, tests/node/).
            ("kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client",
             "extendedKeyUsage=clientAuth"),
        ):
            openssl("req", *ec, "-keyout", str(pki(f"{name}.key")), "-out", str(pki(f"{name}.csr")),
                    "-subj", subject)
            pki(f"{name}.ext").write_text(ext + "\n")
            openssl("x509", "-req", "-in", str(pki(f"{name}.csr")), "-CA", str(pki("ca.crt")),
                    "-CAkey", str(pki("ca.key")), "-CAcreateserial", "-days", "3650",
                    "-extfile", str(pki(f"{name}.ext")), "-out", str(pki(f"{name}.crt")))
        openssl("genrsa", "-out", str(pki("sa.key")), "2048")
        openssl("rsa", "-in", str(pki("sa.key")), "-pubout", "-out", str(pki("sa.pub")))
        self._make_kwok_cert(openssl)

    def _make_kwok_cert(self, openssl: Callable[..., None]) -> None:
        """kwok serves the fake nodes' kubelet API (pods/log) at 127.0.0.1 with this certificate:
        the API server checks it against the test CA, as it checks a real kubelet's."""
        pki = self._pki
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        openssl("req", *ec, "-keyout", str(pki("kwok.key")), "-out", str(pki("kwok.csr")), "-subj", "/CN=kwok")
        pki("kwok.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        openssl("x509", "-req", "-in", str(pki("kwok.csr")), "-CA", str(pki("ca.crt")), "-CAkey", str(pki("ca.key")),
                "-CAcreateserial", "-days", "3650", "-extfile", str(pki("kwok.ext")), "-out", str(pki("kwok.crt")))

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "vpipe-local", "cluster": {
                "server": self.server, "certificate-authority": str(self._pki("ca.crt"))}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(self._pki("admin.crt")),
                "client-key": str(self._pki("admin.key"))}}],
            "contexts": [{"name": "vpipe-local", "context": {
                "cluster": "vpipe-local", "user": "admin", "namespace": "default"}}],
            "current-context": "vpipe-local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def _bin(self, name: str) -> str:
        return str(self.binaries.get(name, self.bin_dir / name))

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn("etcd", [
            self._bin("etcd"),
            "--name=default",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--unsafe-no-fsync",  # test data: durability does not matter, speed does
            # As production clusters set it: an 8 GiB quota (etcd's largest recommended; its
            # 2 GiB default overflowed with one 2,000-pod job's status rewrites) and history
            # compacted every 5 minutes (the API server compacts on its own too).
            "--quota-backend-bytes=8589934592",
            "--auto-compaction-mode=periodic",
            "--auto-compaction-retention=5m",
            "--log-level=warn",
        ])

    def _start_apiserver(self) -> None:
        pki = self._pki
        self._spawn("kube-apiserver", [
            self._bin("kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--cert-dir={self.state_dir / 'apiserver-certs'}",
            f"--tls-cert-file={pki('apiserver.crt')}",
            f"--tls-private-key-file={pki('apiserver.key')}",
            f"--client-ca-file={pki('ca.crt')}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            # Node authorizer + NodeRestriction: a real kubelet (tests/node/) gets exactly a
            # node's rights, as in a production cluster.
            "--authorization-mode=Node,RBAC",
            # ServiceAccount (on by default, named for clarity): every pod gets its
            # ServiceAccount's token, the cluster CA and its namespace mounted, as on a real
            # cluster; pods on the real node (tests/node/) use them to call the API server.
            "--enable-admission-plugins=NodeRestriction,ServiceAccount",
            f"--kubelet-client-certificate={pki('kubelet-client.crt')}",
            f"--kubelet-client-key={pki('kubelet-client.key')}",
            f"--kubelet-certificate-authority={pki('ca.crt')}",
            # A real node's kubelet listens on its InternalIP (the test bridge's gateway):
            # dial that, so the node name need not resolve (no /etc/hosts line).
            # InternalDNS first: kwok's fake nodes publish 127.0.0.1 there (where kwok serves
            # their kubelet API) beside the InternalIP their pods report; a real node has none.
            "--kubelet-preferred-address-types=InternalDNS,InternalIP,Hostname",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki('sa.pub')}",
            f"--service-account-signing-key-file={pki('sa.key')}",
            f"--audit-policy-file={self.state_dir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-maxsize=200",
            "--audit-log-maxbackup=1",
            "--profiling=false",
            "--v=0",
        ])

    def _apiserver_ready(self) -> bool:
        return self._http_ok(f"{self.server}/readyz", client_cert=True)

    def _install_crds(self) -> None:
        from kubernetes import client

        api = client.ApiextensionsV1Api(self.api_client())
        crd_dir = build.volcano_crd_dir()
        names = []
        for path in sorted(crd_dir.glob("*.yaml")):
            body = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: MBs of CRD, a fifth of the CPU
            if not body:
                continue
            try:
                api.create_custom_resource_definition(body)
            except client.ApiException as err:
                if err.status != 409:  # already there (re-used etcd data)
                    raise
            names.append(body["metadata"]["name"])

        def established() -> bool:
            for name in names:
                crd = api.read_custom_resource_definition(name)
                conditions = {c.type: c.status for c in (crd.status.conditions or [])}
                if conditions.get("Established") != "True":
                    return False
            return True

        self._wait(established, "Volcano CRDs established", 60)
        self.log(f"installed {len(names)} Volcano CRDs from {crd_dir}")

    def _start_controllers(self) -> None:
        kubeconfig = str(self.kubeconfig)
        pki = self._pki
        delegated = [f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"]
        self._spawn("kube-controller-manager", [
            self._bin("kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            *delegated,
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['kcm']}",
            f"--cert-dir={self.state_dir / 'kcm-certs'}",
            "--leader-elect=false",
            # Token signing and the kube-root-ca.crt ConfigMap in every namespace (the CA
            # file of each pod's projected ServiceAccount volume).
            f"--service-account-private-key-file={pki('sa.key')}",
            f"--root-ca-file={pki('ca.crt')}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Fake nodes heartbeat every 10-22 s; a long grace period keeps a slow machine
            # from tainting them NotReady and evicting pods mid-test.
            "--node-monitor-grace-period=5m",
            "--v=0",
        ])
        self._spawn("kube-scheduler", [
            self._bin("kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            *delegated,
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['scheduler']}",
            f"--cert-dir={self.state_dir / 'scheduler-certs'}",
            "--leader-elect=false",
            "--v=0",
        ])
        self._spawn("vc-controller-manager", [
            self._bin("vc-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            f"--controllers={VOLCANO_CONTROLLERS}",
            # A job whose sync keeps failing (its queue missing) is terminated after this many
            # rate-limited retries (5 ms doubling): Volcano's default 15 takes 164 s, 12 takes
            # 20 s; the job ends the same way, with the same event, only sooner.
            "--max-requeue-num=12",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{self.ports['vc-cm-health']}",
            f"--listen-address=127.0.0.1:{self.ports['vc-cm-metrics']}",
            *self.volcano_controller_args,
            "--logtostderr",
            "--v=2",
        ])
        self._spawn("vc-scheduler", [
            self._bin("vc-scheduler"),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            f"--scheduler-conf={self.state_dir / 'volcano-scheduler.conf'}",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{self.ports['vc-sched-health']}",
            f"--listen-address=127.0.0.1:{self.ports['vc-sched-metrics']}",
            f"--cache-dump-dir={self.state_dir}",
            "--logtostderr",
            "--v=2",
        ])
        stage_args = [f"--config={path}" for path in sorted(STAGES_DIR.glob("*.yaml"))]
        self.task_log.parent.mkdir(parents=True, exist_ok=True)
        self.task_log.touch()
        logs_config = self.state_dir / "kwok-logs.yaml"
        logs_config.write_text(KWOK_LOGS_CONFIG.format(namespace=behaviour.LOGS_NAMESPACE, file=self.task_log))
        self._spawn("kwok", [
            self._bin("kwok"),
            f"--kubeconfig={kubeconfig}",
            *stage_args,
            f"--config={logs_config}",
            f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
            # The fake nodes' kubelet API: the node stage publishes 127.0.0.1 (InternalDNS,
            # which the API server prefers) and this port, and kwok serves it with TLS.
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
            f"--node-port={self.ports['kwok']}",
            f"--tls-cert-file={self._pki('kwok.crt')}",
            f"--tls-private-key-file={self._pki('kwok.key')}",
            "--node-lease-duration-seconds=40",
            "--cidr=10.244.0.0/16",
            "--node-ip=10.1.0.1",
        ])
        # The last step of a deletion on the kwok nodes, with the pod's UID as precondition
        # (tests/cluster/pod_finalizer.py says why kwok's own delete stage is not used).
        self._spawn("pod-finalizer", [
            sys.executable, str(Path(__file__).resolve().parent / "pod_finalizer.py"),
            f"--kubeconfig={kubeconfig}",
            f"--fake-node-selector={FAKE_NODE_LABEL}=kwok",
        ])

    def _create_nodes(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        shape = self.nodes
        resources = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods)}
        if shape.gpus:
            resources["nvidia.com/gpu"] = str(shape.gpus)
        for index in range(shape.count):
            name = f"kwok-node-{index}"
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {FAKE_NODE_ANNOTATION: "fake"},
                    "labels": {
                        FAKE_NODE_LABEL: "kwok",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                    },
                },
                "status": {"capacity": resources, "allocatable": resources},
            }
            try:
                core.create_node(body)
            except client.ApiException as err:
                if err.status != 409:
                    raise

    def _wait_healthy(self, deadline: float) -> None:
        from kubernetes import client

        api = self.api_client()
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        checks: list[tuple[str, Callable[[], bool]]] = [
            ("kube-controller-manager", lambda: self._http_ok(f"https://127.0.0.1:{self.ports['kcm']}/healthz")),
            ("kube-scheduler", lambda: self._http_ok(f"https://127.0.0.1:{self.ports['scheduler']}/healthz")),
            ("vc-controller-manager", lambda: self._http_ok(f"http://127.0.0.1:{self.ports['vc-cm-health']}/healthz")),
            ("vc-scheduler", lambda: self._http_ok(f"http://127.0.0.1:{self.ports['vc-sched-health']}/healthz")),
            ("kwok", lambda: self._http_ok(f"https://127.0.0.1:{self.ports['kwok']}/healthz")),
        ]

        def nodes_ready() -> bool:
            ready = 0
            for node in core.list_node(label_selector=f"{FAKE_NODE_LABEL}=kwok").items:
                conditions = {c.type: c.status for c in (node.status.conditions or [])}
                ready += conditions.get("Ready") == "True"
            return ready == self.nodes.count

        def default_queue_open() -> bool:
            # The Volcano scheduler creates the default queue; the queue controller opens it.
            try:
                queue = custom.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "default")
            except client.ApiException:
                return False
            return queue.get("status", {}).get("state") == "Open"

        def default_service_account() -> bool:
            # Pods reference the "default" ServiceAccount; kube-controller-manager makes it.
            try:
                core.read_namespaced_service_account("default", "default")
                return True
            except client.ApiException:
                return False

        checks += [(f"{self.nodes.count} fake nodes Ready", nodes_ready),
                   ("Volcano default queue Open", default_queue_open),
                   ("default ServiceAccount", default_service_account)]
        for name, check in checks:
            self._wait(check, name, max(5.0, deadline - time.monotonic()))

    # ----- helpers -------------------------------------------------------------------

    def api_client(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def metrics(self) -> str:
        """The apiserver's Prometheus metrics text."""
        with urllib.request.urlopen(f"{self.server}/metrics", context=self._ssl_context(True), timeout=10) as resp:
            return resp.read().decode()

    def _spawn(self, name: str, args: list[str]) -> None:
        self.processes[name] = spawn(name, args, self.state_dir / "logs", self.detach)

    def _terminate(self, process: Process, grace: float = 10.0) -> None:
        terminate(process, grace)

    def _ssl_context(self, client_cert: bool) -> ssl.SSLContext:
        if not client_cert:
            # kube-controller-manager / kube-scheduler serve /healthz with a self-signed
            # certificate of their own; only reachability matters here.
            return ssl._create_unverified_context()
        ctx = ssl.create_default_context(cafile=str(self._pki("ca.crt")))
        ctx.load_cert_chain(str(self._pki("admin.crt")), str(self._pki("admin.key")))
        return ctx

    def _http_ok(self, url: str, client_cert: bool = False) -> bool:
        context = self._ssl_context(client_cert) if url.startswith("https") else None
        try:
            with urllib.request.urlopen(url, context=context, timeout=5) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _wait(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        wait_until(check, what, timeout, self.processes.values(), self.state_dir / "logs")

    # ----- state file (for `down` from another process) --------------------------------

    def _write_state(self) -> None:
        state = {
            "kubeconfig": str(self.kubeconfig),
            "bin_dir": str(self.bin_dir),
            "ports": self.ports,
            "processes": {p.name: {"pid": p.pid, "args": p.args, "log": str(p.log_path)}
                          for p in self.processes.values()},
        }
        (self.state_dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def attach(cls, state_dir: Path) -> ControlPlane:
        """Re-create a handle on a control plane started by another process (`up`)."""
        state = json.loads((state_dir / "state.json").read_text())
        plane = cls(state_dir=state_dir, bin_dir=Path(state["bin_dir"]), detach=True)
        plane.ports = state["ports"]
        for name, info in state["processes"].items():
            plane.processes[name] = Process(name, info["args"], Path(info["log"]), None, info["pid"])
        return plane


def wait_until(check: Callable[[], bool], what: str, timeout: float, processes: Iterable[Process],
               logs_dir: Path) -> None:
    """Poll `check` until it is true; fail at once when one of our processes exits."""
    end = time.monotonic() + timeout
    while True:
        for process in processes:
            if not process.alive():
                raise StartupError(f"{process.name} exited while waiting for {what}:\n{_tail(process.log_path)}")
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - not ready yet; retry until the deadline
            pass
        if time.monotonic() > end:
            raise StartupError(f"timed out after {timeout:.0f}s waiting for {what}; logs in {logs_dir}")
        time.sleep(0.3)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
