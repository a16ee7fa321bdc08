"""pytest plugin (loaded by tests/conftest.py): session fixtures for a real HDFS
(MiniDFSCluster with WebHDFS) and real GlusterFS volumes. Tests skip with a one-line
reason only when the system cannot be had on this machine at all, and fail instead in CI
(`tests/needs.py`)."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.needs import unavailable
from tests.storage.harness import Gluster, GlusterVolume, MiniHdfs, Unavailable, start_hdfs


# The name pods know the HDFS of `hdfs_for_pods` by (the test gives it to them: tests/argo).
POD_HDFS_NAME = "vpipe-hdfs"


def _running_hdfs(*, ha: bool, datanode_hostname: str | None = None) -> Iterator[MiniHdfs]:
    """Start a MiniDFSCluster (skip, or fail in CI, when it cannot run here), stop it and
    remove its files after."""
    try:
        cluster = start_hdfs(ha=ha, datanode_hostname=datanode_hostname)
    except Unavailable as err:
        unavailable(str(err))
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.base, ignore_errors=True)


@pytest.fixture(scope="session")
def hdfs() -> Iterator[MiniHdfs]:
    """A running MiniDFSCluster: .rpc (host:port), .url, .webhdfs_url, .core_site,
    .conf_dir, .client(), .stop_namenode() / .start_namenode()."""
    yield from _running_hdfs(ha=False)


@pytest.fixture(scope="session")
def hdfs_ha() -> Iterator[MiniHdfs]:
    """An HA MiniDFSCluster: name service "ns1" (nn1 active, nn2 standby), client
    configuration in .conf_dir (core-site.xml + hdfs-site.xml), .failover()."""
    yield from _running_hdfs(ha=True)


@pytest.fixture(scope="session")
def hdfs_for_pods() -> Iterator[MiniHdfs]:
    """A MiniDFSCluster for clients in pods: its NameNode (RPC and HTTP) and its DataNode listen
    on all addresses, and the DataNode is named POD_HDFS_NAME, which the test makes resolve to
    the real node's gateway for its pods. WebHDFS redirects carry that name; an `hdfs://` client
    in a pod needs `dfs.client.use.datanode.hostname` to use it (the NameNode knows the DataNode
    as 127.0.0.1). From this host it is the same as `hdfs` (.client() over RPC on loopback)."""
    yield from _running_hdfs(ha=False, datanode_hostname=POD_HDFS_NAME)


class GlusterVolumes:
    def __init__(self, main: GlusterVolume, small: GlusterVolume) -> None:
        self.volume = main
        self.mount = main.mount
        self.small = small  # 64 MiB brick file system: fills up for real

    def fresh_dir(self, name: str = "t") -> Path:
        path = self.mount / f"{name}-{uuid.uuid4().hex[:8]}"
        path.mkdir()
        return path


@pytest.fixture(scope="session")
def gluster() -> Iterator[GlusterVolumes]:
    """A FUSE-mounted single-brick GlusterFS volume (.mount, .fresh_dir()) and a small
    size-limited one (.small.mount) for the full-destination test."""
    work = Path(tempfile.mkdtemp(prefix="vpipe-gluster-"))
    harness = Gluster(work)
    try:
        harness.start()
    except Unavailable as err:
        shutil.rmtree(work, ignore_errors=True)
        unavailable(str(err))
    tag = uuid.uuid4().hex[:6]
    try:
        main = harness.create_volume(f"vpt{tag}")
        small = harness.create_volume(f"vps{tag}", size_mib=64)
        yield GlusterVolumes(main, small)
    finally:
        harness.stop()
        shutil.rmtree(work, ignore_errors=True)
