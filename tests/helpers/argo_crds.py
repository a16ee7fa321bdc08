"""Argo's own CRDs (full schemas, fetched into the Go module cache at test time) installed on
a test cluster, server-side dry runs against them, and a real Workflow to own a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.waiting import wait_for

ARGO_MODULE = "github.com/argoproj/argo-workflows/v4"
ARGO_VERSION = "v4.0.5"
# The kinds pipelines/argo/ holds, and Workflow: the train template makes the Workflow the
# owner of its Volcano Job, so the container test below needs real Workflows to own its jobs.
# Each full schema is large (the API server takes a while to establish one on a small
# machine), so only these.
ARGO_KINDS = ("workflowtemplates", "cronworkflows", "workflows")


def argo_crd_dir() -> Path:
    from tests.cluster import build

    if not build.go_available():
        pytest.skip("Go is not installed: cannot fetch Argo's CRDs into the module cache")
    return build.module_dir(ARGO_MODULE, ARGO_VERSION) / "manifests" / "base" / "crds" / "full"


_INSTALLED: set[str] = set()  # kubeconfigs whose cluster has them (the fixture is used by two modules)


def _install_crds(cluster: Any) -> None:
    import json

    from kubernetes import client

    if str(cluster.kubeconfig) in _INSTALLED:
        return
    api = client.ApiextensionsV1Api(cluster.api_client())
    names = []
    # Raw responses (_preload_content=False): the client's models for a 2.5 MB schema take
    # tens of seconds to build, and only the status is read here.
    for kind in ARGO_KINDS:
        # libyaml's safe loader: a 2.5 MB CRD takes ~2 s of CPU in the pure-Python parser, 0.4 s in C.
        crd = yaml.load((argo_crd_dir() / f"argoproj.io_{kind}.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        names.append(crd["metadata"]["name"])
        try:  # a cheap read first: the API server takes long to refuse a 2.5 MB duplicate
            api.read_custom_resource_definition_status(crd["metadata"]["name"], _preload_content=False)
            continue
        except client.ApiException as err:
            if err.status != 404:
                raise
        api.create_custom_resource_definition(crd, _preload_content=False)

    def established() -> bool:
        for name in names:
            raw = api.read_custom_resource_definition_status(name, _preload_content=False)
            conditions = (json.loads(raw.data).get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_for("Argo CRDs established", established, timeout=60)
    _INSTALLED.add(str(cluster.kubeconfig))


def dry_run_create(cluster: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """POST with dryRun=All and fieldValidation=Strict: the API server validates the object
    against its schema (and refuses unknown fields rather than pruning them); nothing is
    stored. Returns the object as it would have been stored."""
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(cluster.api_client())
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    namespace = obj["metadata"].get("namespace") if resource.namespaced else None
    created = resource.create(body=obj, namespace=namespace, dry_run="All",
                              query_params=[("fieldValidation", "Strict")])
    return created.to_dict()  # type: ignore[no-any-return]


def owner_workflow(cluster: Any, namespace: str, name: str) -> dict[str, str]:
    """A real Workflow to own the job the container creates: `--owner` names the Workflow,
    and Kubernetes' garbage collector deletes a job whose owner does not exist (it did, in a
    run where Argo's Workflow CRD had been installed by an earlier test). It only waits on a
    suspend node, so a controller that sees it starts no pod."""
    from kubernetes import client

    body = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": f"owner-{name}", "namespace": namespace},
            "spec": {"entrypoint": "hold", "templates": [{"name": "hold", "suspend": {}}]}}
    created = client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
        "argoproj.io", "v1alpha1", namespace, "workflows", body)
    return {"uid": created["metadata"]["uid"], "name": created["metadata"]["name"], "namespace": namespace}
