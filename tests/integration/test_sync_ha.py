"""`sync` from an HA name service (two NameNodes, client configuration from
HADOOP_CONF_DIR), including a fail-over in the middle of a sync."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from tests.storage.trees import put_tree, read_tree, temp_files
from volcano_pipelines.steps._sync import sync
from volcano_pipelines.transfer.progress import Progress

pytestmark = [pytest.mark.hdfs, pytest.mark.gluster, pytest.mark.timeout(300)]


def test_ha_name_service_with_failover_mid_sync(hdfs_ha, gluster, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client, root = hdfs_ha.client(), f"/ha/{uuid.uuid4().hex[:8]}"
    files = {f"d{i % 5}/f{i:04d}.bin": os.urandom(8 << 10) for i in range(400)}
    put_tree(client, root, files)
    dst = gluster.fresh_dir("ha")
    switched = threading.Event()

    class Failover(Progress):
        def file_done(self, path: str, result: str) -> None:
            super().file_done(path, result)
            if self.files_done == 30 and not switched.is_set():
                switched.set()
                hdfs_ha.failover()  # this worker waits; the others keep copying through it

    result = sync(f"hdfs://ns1{root}", str(dst), transfers=4, hadoop_conf_dir=str(hdfs_ha.conf_dir), progress=Failover())

    assert switched.is_set() and result.failed == 0 and result.copied == len(files)
    assert read_tree(dst) == files and temp_files(dst) == []

    # The default file system (hdfs:///) and the name service come from HADOOP_CONF_DIR.
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hdfs_ha.conf_dir))
    again = sync(f"hdfs://{root}", str(dst))
    assert again.copied == 0 and again.skipped == len(files)
