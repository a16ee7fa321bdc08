"""The shipped lifecycle Role (manifests/base/role-lifecycle.yaml) against what `vpipe reap`,
`vpipe tensorboard` and `vpipe serve` really do. With only that Role bound to the
`vpipe-runner` ServiceAccount, every step's success and failure paths run with a real token
of it on the RBAC-enforcing API server, audit log on; nothing may be denied, and the Role may
grant nothing that no path used. The helpers are in tests/helpers/rbac.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import behaviour
from tests.helpers.lifecycle import Cluster, make_log_pvc, volcano_job
from tests.helpers.rbac import MANIFESTS, SERVICE_ACCOUNT, audited, created_by_apply, granted, installed, token_kubeconfig
from tests.helpers.vpipe import vpipe
from tests.integration.waiting import wait_for
from tests.unit.objects.tfserving_standin import standin, status_body

pytestmark = pytest.mark.integration

FILES = ("serviceaccount.yaml", "role-lifecycle.yaml")


def lifecycle_objects(namespace: str) -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert "role-lifecycle.yaml" in kustomization["resources"], "the lifecycle Role is not part of the base"
    objects = []
    for name in FILES:
        for obj in yaml.safe_load_all((MANIFESTS / name).read_text()):
            obj["metadata"]["namespace"] = namespace
            for subject in obj.get("subjects", []):
                subject["namespace"] = namespace
            objects.append(obj)
    return objects


@pytest.fixture
def only_lifecycle_role(cluster: Any, namespace: str) -> Iterator[list[dict[str, Any]]]:
    with installed(cluster, namespace, lifecycle_objects(namespace)) as objects:
        yield objects


def test_lifecycle_role_is_exactly_what_every_path_uses(cluster: Any, namespace: str, tmp_path: Path,
                                                        only_lifecycle_role: list[dict[str, Any]]) -> None:
    plane = cluster.require_local()  # reads the API server's audit log
    admin = Cluster(cluster, namespace)
    pvc_gen = make_log_pvc(cluster, namespace)
    pvc = next(pvc_gen)
    try:
        runs = _every_path(admin, token_kubeconfig(cluster, namespace, SERVICE_ACCOUNT, tmp_path / "runner.kubeconfig"),
                           pvc, tmp_path)
    finally:
        next(pvc_gen, None)

    expected_codes = {"reap": 0, "reap-abort": 1, "sweep-scale": 0, "sweep-delete": 0, "tensorboard": 0,
                      "tensorboard-missing-pvc": 2, "serve": 0, "serve-rollback": 1}
    assert {name: run.returncode for name, run in runs.items()} == expected_codes, \
        {name: run.stderr[-2000:] for name, run in runs.items() if run.returncode != expected_codes[name]}
    assert runs["reap"].result["reaped"][0]["action"] == "completed"
    assert runs["reap-abort"].result["failed"][0]["action"] == "aborted"
    assert runs["sweep-scale"].result["reaped"][0]["action"] == "scaled"
    assert runs["sweep-delete"].result["reaped"][0]["action"] == "deleted"
    assert runs["tensorboard"].result["ready"]
    assert runs["serve"].result["succeeded"] and runs["serve-rollback"].result["rolled_back"]
    for name, run in runs.items():
        assert "permission" not in run.stderr.lower() and "forbidden" not in run.stderr.lower(), (name, run.stderr)

    user = f"system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}"
    wait_for("audit log flushed", lambda: ("patch", "apps", "deployments", "") in audited(plane.audit_log, user), timeout=30)
    seen = audited(plane.audit_log, user)
    denied = sorted(access for access, decisions in seen.items() if "allow" not in decisions)
    used = {access for access, decisions in seen.items() if "allow" in decisions}
    # A server-side apply that creates the object is logged as a patch answered 201 Created;
    # the API server authorized it as a create too (see the test below).
    used |= {("create", *access[1:]) for access in created_by_apply(plane.audit_log, user)}
    assert denied == [], f"the ServiceAccount was refused: {denied}"
    unused = sorted(granted(only_lifecycle_role) - used)
    assert unused == [], f"the Role grants what no step used: {unused}"


def test_creating_through_server_side_apply_needs_create(cluster: Any, namespace: str, tmp_path: Path) -> None:
    """Why the Role grants create next to patch: without it, the first apply is refused."""
    objects = lifecycle_objects(namespace)
    for obj in objects:
        for rule in obj.get("rules", []):
            if "create" in rule["verbs"] and "deployments" in rule["resources"]:
                rule["verbs"].remove("create")
    with installed(cluster, namespace, objects):
        pvc_gen = make_log_pvc(cluster, namespace)
        pvc = next(pvc_gen)
        try:
            kubeconfig = token_kubeconfig(cluster, namespace, SERVICE_ACCOUNT, tmp_path / "runner.kubeconfig")
            run = vpipe(kubeconfig, "tensorboard", "--name", "tb", "--log-pvc", pvc, "--timeout", "30")
        finally:
            next(pvc_gen, None)
    assert run.returncode == 3, run.stderr
    assert "permission denied to check deployment" in run.stderr and 'cannot create resource "deployments"' in run.stderr


def _every_path(admin: Cluster, kubeconfig: Path, pvc: str, tmp_path: Path) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    ns = admin.namespace
    # reap, one job: a hand-made Volcano Job without the completion policy is completed...
    admin.create_job(volcano_job("ok", ns))
    runs["reap"] = vpipe(kubeconfig, "reap", "ok", "--grace", "0", "--timeout", "180")
    # ... and one whose worker failed is aborted on request.
    admin.create_job(volcano_job("bad", ns, worker_labels=behaviour.fail_with(3)))
    wait_for("a worker failed", lambda: "Failed" in admin.job_pods("bad").values(), timeout=120, explain=admin.explain)
    runs["reap-abort"] = vpipe(kubeconfig, "reap", "bad", "--on-failure", "abort", "--timeout", "60")
    # reap, sweeps of the classic layout: scaled to zero, then deleted.
    admin.classic("cl", {"app": "cl"})
    admin.classic("cd", {"app": "cd"})
    wait_for("worker Jobs complete", lambda: admin.batch_jobs_complete("cl") and admin.batch_jobs_complete("cd"),
             timeout=120, explain=admin.explain)
    runs["sweep-scale"] = vpipe(kubeconfig, "reap", "--selector", "app=cl", "--once", "--grace", "0", "--timeout", "120")
    runs["sweep-delete"] = vpipe(kubeconfig, "reap", "--selector", "app=cd", "--once", "--grace", "0",
                                 "--delete-deployment", "--timeout", "120")
    # tensorboard: owned by a job, with an Ingress; and a missing PVC.
    runs["tensorboard"] = vpipe(kubeconfig, "tensorboard", "--name", "tb", "--log-pvc", pvc, "--job", "ok",
                                "--ingress-path", "/tb", "--timeout", "120")
    runs["tensorboard-missing-pvc"] = vpipe(kubeconfig, "tensorboard", "--name", "tb2", "--log-pvc", "nope")
    # serve: a model config (version policy), the AVAILABLE wait and smoke test; then a rollout
    # whose pods fail, rolled back.
    with standin("m", [(200, status_body((1, "AVAILABLE")))]) as tfs:
        base = ["serve", "--name", "m", "--pvc", pvc, "--rest-url", tfs.url, "--timeout", "120"]
        runs["serve"] = vpipe(kubeconfig, *base, "--version-policy", "all", "--smoke-payload", '{"instances": [1]}')
        runs["serve-rollback"] = vpipe(kubeconfig, *base, "--version-policy", "all",
                                       "--label", f"{behaviour.FAIL_LABEL}=3")
    return runs
