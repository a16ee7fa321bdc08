"""The shipped RBAC (manifests/base) is enough for `vpipe train` / `vpipe status`, proven by
running them with a real ServiceAccount token against the RBAC-enforcing API server, and
grants nothing beyond what they use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from kubernetes import client

pytestmark = pytest.mark.integration

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests" / "base"
SERVICE_ACCOUNT = "vpipe-runner"


def manifests(namespace: str) -> list[dict[str, Any]]:
    """The kustomize base as kustomize would render it for `namespace` (cluster-scoped
    objects get a per-test name so tests do not share them)."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    objects = []
    for name in kustomization["resources"]:
        for obj in yaml.safe_load_all((MANIFESTS / name).read_text()):
            if obj["kind"].startswith("Cluster"):
                obj["metadata"]["name"] = f"{obj['metadata']['name']}-{namespace}"
                if obj["kind"] == "ClusterRoleBinding":
                    obj["roleRef"]["name"] = f"{obj['roleRef']['name']}-{namespace}"
            else:
                obj["metadata"]["namespace"] = namespace
            for subject in obj.get("subjects", []):
                subject["namespace"] = namespace
            objects.append(obj)
    return objects


def apply(api: client.ApiClient, obj: dict[str, Any]) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    create = {
        "ServiceAccount": lambda o: core.create_namespaced_service_account(o["metadata"]["namespace"], o),
        "Role": lambda o: rbac.create_namespaced_role(o["metadata"]["namespace"], o),
        "RoleBinding": lambda o: rbac.create_namespaced_role_binding(o["metadata"]["namespace"], o),
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
    }[obj["kind"]]
    create(obj)


def token_kubeconfig(cluster: Any, namespace: str, service_account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as the ServiceAccount with a real bound token."""
    api = cluster.api_client()
    request = client.CoreV1Api(api).create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"audiences": [], "expirationSeconds": 3600}}
    )
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": server["cluster"]}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa", "namespace": namespace}}],
        "users": [{"name": "sa", "user": {"token": request.status.token}}],
    }))
    return path


@pytest.fixture
def runner(cluster: Any, namespace: str, tmp_path: Path) -> Iterator[Path]:
    api = cluster.api_client()
    objects = manifests(namespace)
    for obj in objects:
        apply(api, obj)
    try:
        yield token_kubeconfig(cluster, namespace, SERVICE_ACCOUNT, tmp_path / "runner.kubeconfig")
    finally:
        rbac = client.RbacAuthorizationV1Api(api)
        for obj in objects:
            if obj["kind"] == "ClusterRole":
                rbac.delete_cluster_role(obj["metadata"]["name"])
            elif obj["kind"] == "ClusterRoleBinding":
                rbac.delete_cluster_role_binding(obj["metadata"]["name"])


def vpipe(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "volcano_pipelines", *argv], capture_output=True, text=True, timeout=300)


def test_shipped_role_is_enough_to_train_abort_and_report(runner: Path, namespace: str) -> None:
    ok = vpipe("train", "tf", "--name", "rbac", "-n", namespace, "--ps", "1", "--workers", "2",
               "--kubeconfig", str(runner), "--run-id", "rbac-1", "--json", "-q")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["phase"] == "Completed"
    assert "permission" not in ok.stderr.lower() and "cannot read" not in ok.stderr.lower()

    status = vpipe("status", "rbac", "-n", namespace, "--kubeconfig", str(runner), "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["phase"] == "Completed"

    # A gang that never fits: the timeout path reads the PodGroup and aborts through a Command.
    stuck = vpipe("train", "tf", "--name", "stuck", "-n", namespace, "--gpus-per-worker", "64",
                  "--kubeconfig", str(runner), "--timeout", "8", "--json", "-q")
    assert stuck.returncode == 1, stuck.stderr
    result = json.loads(stuck.stdout)
    assert result["message"].endswith("job aborted"), result  # not "deleted": the Command was allowed

    missing_queue = vpipe("train", "tf", "--name", "q", "-n", namespace, "--queue", "nope", "--kubeconfig", str(runner), "-q")
    assert missing_queue.returncode == 2 and "default" in missing_queue.stderr  # queues readable and listable


def test_without_the_role_the_step_exits_3_and_says_so(cluster: Any, namespace: str, tmp_path: Path) -> None:
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    kubeconfig = token_kubeconfig(cluster, namespace, "nobody", tmp_path / "nobody.kubeconfig")
    proc = vpipe("train", "tf", "--name", "denied", "-n", namespace, "--kubeconfig", str(kubeconfig), "-q")
    assert proc.returncode == 3, proc.stderr
    assert "permission denied" in proc.stderr and "403" in proc.stderr


def can(cluster: Any, namespace: str, verb: str, group: str, resource: str) -> bool:
    review = client.AuthorizationV1Api(cluster.api_client()).create_subject_access_review({
        "spec": {"user": f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
                 "resourceAttributes": {"namespace": namespace, "verb": verb, "group": group, "resource": resource}},
    })
    return bool(review.status.allowed)


GRANTED = [("create", "batch.volcano.sh", "jobs"), ("watch", "batch.volcano.sh", "jobs"), ("create", "bus.volcano.sh", "commands"),
           ("get", "scheduling.volcano.sh", "podgroups"), ("list", "", "pods"), ("list", "", "events")]
NOT_GRANTED = [("get", "", "secrets"), ("delete", "", "pods"), ("create", "", "pods"), ("update", "batch.volcano.sh", "jobs"),
               ("patch", "batch.volcano.sh", "jobs"), ("delete", "scheduling.volcano.sh", "queues"),
               ("create", "scheduling.volcano.sh", "podgroups"), ("list", "", "configmaps")]


def test_role_grants_what_the_steps_use_and_nothing_more(cluster: Any, runner: Path, namespace: str) -> None:
    assert [rule for rule in GRANTED if not can(cluster, namespace, *rule)] == []
    assert [rule for rule in NOT_GRANTED if can(cluster, namespace, *rule)] == []
