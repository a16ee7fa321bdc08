"""pytest plugin: a real node (kubelet + containerd + runc + CNI + CoreDNS) on the
session's local control plane, for tests marked ``realnode``.

Loaded by ``tests/conftest.py``. ``real_node`` (session) yields a started
``tests.node.launcher.RealNode``: ``.name``, ``.gateway_ip``, ``.busybox_image``,
``.import_image(archive)``, ``.placement()`` (nodeSelector + toleration), ``.label`` /
``.taint``. When the node cannot be had here (a named external cluster, not root, a
missing package) tests skip with one line, and fail in CI (``tests/needs.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.needs import unavailable
from tests.node import build as node_build
from tests.node.launcher import RealNode

# Host programs the node runs (Debian packages containerd, runc, containernetworking-plugins,
# iproute2, nftables, openssl; tests/cluster/ci_prepare.sh installs them).
HOST_PROGRAMS = ("containerd", "ctr", "runc", "ip", "nft", "openssl")
CNI_PLUGINS = (Path("/usr/lib/cni/bridge"), Path("/usr/lib/cni/host-local"), Path("/usr/lib/cni/loopback"))


def missing_requirements() -> list[str]:
    """Why no real node can run on this machine (empty when it can)."""
    missing = [] if os.geteuid() == 0 else ["root (containerd, mounts and network namespaces)"]
    missing += [p for p in HOST_PROGRAMS if not shutil.which(p)]
    missing += [str(p) for p in CNI_PLUGINS if not p.exists()]
    return missing + node_build.missing_tools()


_build_error: list[str] = []


@pytest.hookimpl(trylast=True)  # after the control plane's build hook and -m / -k selection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the node's binaries and images before the first test, outside the per-test
    timeout, only when real-node tests were selected and the machine can run them."""
    if not any(item.get_closest_marker("realnode") for item in items) or missing_requirements():
        return
    if node_build.is_built(node_build.node_dir()):
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    log = (lambda msg: reporter.write_line(f"[tests.node] {msg}")) if reporter else print
    try:
        node_build.build(log=log)
    except Exception as err:  # noqa: BLE001 - reported by every real-node test
        _build_error.append(f"building the real test node failed: {err}")


@pytest.fixture(scope="session")
def real_node(cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNode]:
    plane = cluster.plane
    if plane is None:
        unavailable(f"the real node joins the local control plane only (this run uses a {cluster.kind} cluster)")
    missing = missing_requirements()
    if missing:
        unavailable(f"no real node on this machine, missing: {', '.join(missing)} (tests/cluster/ci_prepare.sh)")
    if _build_error:
        pytest.fail(_build_error[0], pytrace=False)
    artifacts = node_build.build(log=lambda msg: None)  # normally done at collection time
    node = RealNode(state_dir=tmp_path_factory.mktemp("real-node"), artifacts=artifacts, server=plane.server,
                    ca_dir=plane.pki_dir, admin_kubeconfig=plane.kubeconfig, log=lambda msg: None)
    node.start()
    try:
        yield node
    finally:
        node.stop()
