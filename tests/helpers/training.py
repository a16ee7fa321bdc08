"""Training on the real node: the examples, quiet TF logs, a worker that fails the way a user's
program does, hostPath PVs on the node bound to one claim each, and the train step's inputs that
put every pod on the node."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2"}


# A worker that fails the way a user's program does (a last log line, then exit 3) while
# its parameter server serves on.
FAIL_SH = """#!/bin/bash
if [ "$VPIPE_ROLE" != worker ]; then exec sleep infinity; fi
echo "worker $VK_TASK_INDEX: loading data"
echo "worker $VK_TASK_INDEX giving up: exit 3" >&2
exit 3
"""


@dataclass(frozen=True)
class Volumes:
    data_pvc: str
    log_pvc: str
    data_dir: Path  # on the host: the GlusterFS FUSE mount
    log_dir: Path


def _host_path_pvc(core: Any, namespace: str, name: str, path: Path, node_name: str) -> None:
    """A PV on the real node's file system (hostPath, node affinity to it) bound to one claim."""
    pv = f"{namespace}-{name}"[:63]
    core.create_persistent_volume({
        "metadata": {"name": pv, "labels": {"vpipe-test": "true"}},
        "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": name},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}]}]}},
        },
    })
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })


def toleration(node: Any) -> str:
    return f"{node.taint['key']}={node.taint['value']}:{node.taint['effect']}"


def placement(node: Any) -> dict[str, Any]:
    """The train step's own inputs (every task: "") that put every pod on the real node, and
    a CPU request that lets four pods share its two cores (the default asks one core each)."""
    return {"node_selector": {"": {node.label: node.label_value}}, "tolerations": {"": [toleration(node)]},
            "cpu": {"": "250m"}, "memory": {"": "1536Mi"}}
