"""The first sync into a fresh, root-owned volume (issue 28, item 8), under Argo v4.0.5's real
controller on the real node: the shipped `vpipe-sync` template's pods run as uid 1000, and a
volume whose root is owned by root with mode 755 (most freshly provisioned PVs) would refuse
the dataset directory. The templates' pod-level `fsGroup: 1000` (`fsGroupChangePolicy:
OnRootMismatch`) has the kubelet give the volume the group and group write before the
container starts, so the step creates `/data/<name>` and copies into it.

The volume is a `local` PV (a directory of this machine, node affinity to the real node): the
kubelet manages ownership for local volumes, as for block volumes and CSI drivers that allow it
(not for hostPath or NFS-like volumes: docs/argo.md). The source is the examples directory that
ships inside the runtime image, so no other system is needed."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.workflows import _why, submit_from_template, wait_finished

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers]

# Inside the runtime image: the package's own examples (setup.py ships examples/ as _examples).
SOURCE = "/opt/vpipe/lib/python3.11/site-packages/volcano_pipelines/_examples"


def _local_pvc(core: Any, namespace: str, name: str, path: Path, node_name: str) -> str:
    pv = f"vpipe-{uuid.uuid4().hex[:10]}"
    core.create_persistent_volume({
        "metadata": {"name": pv, "labels": {"vpipe-test": "true"}},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
            "local": {"path": str(path)},
            "claimRef": {"namespace": namespace, "name": name},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}]}]}},
        },
    })
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })
    return pv


@pytest.mark.skipif(os.geteuid() != 0, reason="a root-owned volume needs root to make")
def test_the_first_sync_into_a_root_owned_volume_creates_the_dataset_directory(
        cluster: Any, namespace: str, real_node: Any, argo: Any, tmp_path: Path) -> None:
    api = cluster.api_client()
    core = client.CoreV1Api(api)
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    support.apply_objects(api, namespace, support.load("pipelines/argo/sync.yaml"))
    volume = tmp_path / "fresh-volume"
    volume.mkdir()
    os.chown(volume, 0, 0)
    volume.chmod(0o755)  # as a freshly provisioned volume: root's, not writable for uid 1000
    pv = _local_pvc(core, namespace, "fresh", volume, real_node.name)
    try:
        # On the real node through the workflow's placement (submit_from_template).
        name = submit_from_template(api, namespace, real_node, "vpipe-sync", "first-sync-",
                                    {"src": SOURCE, "dst": "/data/mnist", "data-pvc": "fresh"})
        finished = wait_finished(api, namespace, name, timeout=300)
    finally:
        support.delete_cluster_scoped(api, objects)
    try:
        assert finished["status"]["phase"] == "Succeeded", _why(finished)
        copied = sorted(p.relative_to(volume / "mnist").as_posix() for p in (volume / "mnist").rglob("*") if p.is_file())
        assert "data/make_dataset.py" in copied, copied
        info = volume.stat()
        assert info.st_gid == 1000 and info.st_mode & stat.S_IWGRP, (info.st_gid, oct(info.st_mode))
        assert (volume / "mnist").stat().st_uid == 1000  # the step's user made it
    finally:
        core.delete_persistent_volume(pv)
