"""pytest plugin: a real node (kubelet + containerd + runc + CNI + CoreDNS) on the
session's local control plane, for tests marked ``realnode``.

Loaded by ``tests/conftest.py``. ``real_node`` (session) yields a started
``tests.node.launcher.RealNode``: ``.name``, ``.gateway_ip``, ``.busybox_image``,
``.import_image(archive)``, ``.placement()`` (nodeSelector + toleration), ``.label`` /
``.taint``. When the node cannot be had here (a named external cluster, not root, a
missing package) tests skip with one line, and fail in CI (``tests/needs.py``).

The training tests of tests/node, tests/argo and tests/kfp_docker share ``node`` (module: the
real node with the trainer and TensorBoard images imported), ``code_url`` (module: examples/
over HTTP on the bridge) and ``volumes`` (the data staged from HDFS onto GlusterFS, as PVCs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers.http_server import serve
from tests.helpers.training import EXAMPLES, FAIL_SH, Volumes, _host_path_pvc
from tests.needs import unavailable
from tests.node import build as node_build
from tests.node.launcher import RealNode
from tests.storage.trees import put_tree
from volcano_pipelines.steps import sync

if TYPE_CHECKING:  # a plugin loaded after this one (tests/conftest.py): imported here, it could not be rewritten
    from tests.images.fixtures import Images

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


@pytest.fixture(scope="module")
def node(real_node: Any, images: Images) -> Any:
    """The real node with the trainer and TensorBoard images in its containerd."""
    for name in ("trainer-tf", "trainer-mpi", "tensorboard"):
        real_node.import_image(images.archive(name))
    return real_node


@pytest.fixture(scope="module")
def code_url(node: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """examples/ (and fail/) over HTTP on the bridge's host address: the one place off the
    bridge that pods reach."""
    root = tmp_path_factory.mktemp("code")
    for example in ("tf-ps", "mpi"):
        (root / example).symlink_to(EXAMPLES / example)
    (root / "fail").mkdir()
    (root / "fail" / "run.sh").write_text(FAIL_SH)
    with serve(root, host=node.gateway_ip) as server:
        yield server.base


@pytest.fixture
def volumes(cluster: Any, namespace: str, node: Any, hdfs: Any, gluster: Any, tmp_path: Path) -> Iterator[Volumes]:
    """Data staged by the sync step from HDFS onto GlusterFS, exposed to pods as PVCs."""
    from kubernetes import client

    made = tmp_path / "dataset"
    subprocess.run([sys.executable, str(EXAMPLES / "data" / "make_dataset.py"), str(made), "--shards", "2"],
                   check=True, capture_output=True)
    hdfs_dir = f"/datasets/{namespace}"
    put_tree(hdfs.client(), hdfs_dir, {p.name: p.read_bytes() for p in made.iterdir()})
    root = gluster.fresh_dir(namespace)
    data_dir, log_dir = root / "data", root / "logs"
    result = sync(f"{hdfs.url}{hdfs_dir}", str(data_dir), checksum=True)
    assert result.copied == len(list(made.iterdir())) and not result.failed
    log_dir.mkdir()
    log_dir.chmod(0o777)  # the trainer image runs as uid 1000; a hostPath PV has no fsGroup
    core = client.CoreV1Api(cluster.api_client())
    _host_path_pvc(core, namespace, "data", data_dir, node.name)
    _host_path_pvc(core, namespace, "logs", log_dir, node.name)
    try:
        yield Volumes("data", "logs", data_dir, log_dir)
    finally:
        for pv in (f"{namespace}-data"[:63], f"{namespace}-logs"[:63]):
            core.delete_persistent_volume(pv)
