"""`vpipe pv reuse` and `vpipe namespace prepare` (src/volcano_pipelines/cli/admin.py) on the
real control plane: the PV controller really re-binds the volume; the secret copy is
idempotent. The pure edits are checked first, without a cluster."""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from tests.helpers.vpipe import VPIPE
from tests.integration.waiting import wait_for
from volcano_pipelines.steps._admin import reuse_claim_ref, secret_copy
from volcano_pipelines.errors import InputError



def _pv(phase: str, ref: dict[str, str] | None) -> dict[str, Any]:
    return {"metadata": {"name": "data-pv"}, "spec": {"claimRef": ref}, "status": {"phase": phase}}


def test_claim_ref_rewrite() -> None:
    old = {"namespace": "ml", "name": "data", "uid": "u1", "resourceVersion": "7"}
    patch = reuse_claim_ref(_pv("Released", old), "ml", "data")  # same name, new claim object
    assert patch == {"spec": {"claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ml",
                                           "name": "data", "uid": None, "resourceVersion": None}}}
    assert reuse_claim_ref(_pv("Released", {"namespace": "ml", "name": "new"}), "ml", "new") is None
    assert reuse_claim_ref(_pv("Bound", {**old, "name": "new"}), "ml", "new") is None
    with pytest.raises(InputError, match="it is Bound to ml/data"):
        reuse_claim_ref(_pv("Bound", old), "ml", "other")


def test_secret_copy_keeps_content_not_identity() -> None:
    source = {"metadata": {"name": "reg", "namespace": "ops", "uid": "u", "resourceVersion": "3",
                           "labels": {"a": "b"}, "ownerReferences": [{"name": "x"}]},
              "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}}
    copy = secret_copy(source, "team-a")
    assert copy["metadata"] == {"name": "reg", "namespace": "team-a", "labels": {"a": "b"},
                                "annotations": {"volcano-pipelines/copied-from": "ops/reg"}}
    assert copy["type"] == source["type"] and copy["data"] == source["data"]


def _vpipe(cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VPIPE, *args, "--kubeconfig", str(cluster.kubeconfig), "--json"],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.integration
def test_pv_reuse_rebinds_a_released_volume(cluster: Any, namespace: str) -> None:
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    pv_name = f"vpipe-reuse-{uuid.uuid4().hex[:6]}"
    claim = {"accessModes": ["ReadWriteMany"], "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}}
    core.create_persistent_volume({"metadata": {"name": pv_name}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/tmp/vpipe-reuse"},
        "claimRef": {"namespace": namespace, "name": "first"}}})
    try:
        core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "first"}, "spec": claim})

        def phase() -> str:
            return str(core.read_persistent_volume(pv_name).status.phase)

        wait_for("PV bound", lambda: phase() == "Bound", timeout=60)
        core.delete_namespaced_persistent_volume_claim("first", namespace)
        wait_for("PV released", lambda: phase() == "Released", timeout=60)

        reused = _vpipe(cluster, "pv", "reuse", pv_name, "--for", "second", "-n", namespace)
        assert reused.returncode == 0, reused.stderr
        assert json.loads(reused.stdout)["changed"] is True
        core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "second"}, "spec": claim})
        wait_for("PV bound to the new claim", lambda: phase() == "Bound", timeout=60)
        ref = core.read_persistent_volume(pv_name).spec.claim_ref
        assert (ref.namespace, ref.name) == (namespace, "second")
        wait_for("claim bound", lambda: core.read_namespaced_persistent_volume_claim("second", namespace).spec.volume_name
                 == pv_name, timeout=60)

        again = _vpipe(cluster, "pv", "reuse", pv_name, "--for", "second", "-n", namespace)
        assert again.returncode == 0 and json.loads(again.stdout)["changed"] is False, again.stderr
        busy = _vpipe(cluster, "pv", "reuse", pv_name, "--for", "third", "-n", namespace)
        assert busy.returncode == 2 and f"Bound to {namespace}/second" in busy.stderr, busy.stderr
        missing = _vpipe(cluster, "pv", "reuse", "no-such-pv", "--for", "x", "-n", namespace)
        assert missing.returncode == 2 and "an existing PersistentVolume" in missing.stderr
    finally:
        core.delete_persistent_volume(pv_name)


@pytest.mark.integration
def test_namespace_prepare_copies_the_pull_secret_idempotently(cluster: Any, namespace: str) -> None:
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    team = f"team-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": team, "labels": {"vpipe-test": "true"}}})
    try:
        core.create_namespaced_secret(namespace, {
            "metadata": {"name": "vpipe-registry"}, "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": '{"auths": {"r.example": {"auth": "dTpw"}}}'}})
        source = f"{namespace}/vpipe-registry"

        missing = _vpipe(cluster, "namespace", "prepare", team, "absent-ns", "--pull-secret-from", source)
        assert missing.returncode == 2 and "absent-ns" in missing.stderr
        with pytest.raises(client.ApiException):  # nothing written when one target is wrong
            core.read_namespaced_secret("vpipe-registry", team)

        runs = [_vpipe(cluster, "namespace", "prepare", team, "--pull-secret-from", source) for _ in range(2)]
        assert [json.loads(r.stdout)[0]["action"] for r in runs] == ["created", "unchanged"], [r.stderr for r in runs]
        copied = core.read_namespaced_secret("vpipe-registry", team)
        assert copied.type == "kubernetes.io/dockerconfigjson"
        assert copied.data == core.read_namespaced_secret("vpipe-registry", namespace).data

        core.patch_namespaced_secret("vpipe-registry", namespace, {"stringData": {".dockerconfigjson": '{"auths": {}}'}})
        changed = _vpipe(cluster, "namespace", "prepare", team, "--pull-secret-from", source)
        assert json.loads(changed.stdout)[0]["action"] == "updated", changed.stderr
        assert core.read_namespaced_secret("vpipe-registry", team).data == \
            core.read_namespaced_secret("vpipe-registry", namespace).data
    finally:
        core.delete_namespace(team)
