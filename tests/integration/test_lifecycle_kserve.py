"""`vpipe serve --target kserve` renders an InferenceService that KServe's own CRD schema
accepts: the CRD comes from the Go module cache (`go mod download
github.com/kserve/kserve@v0.16.0`, never copied into this repository), is installed on the
real API server, and the rendered object is created as a server-side dry run with strict
field validation (an unknown or misplaced field is an error, not silently pruned)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.helpers.vpipe import VPIPE
from tests.integration.waiting import wait_for

pytestmark = pytest.mark.integration

KSERVE = "github.com/kserve/kserve@v0.16.0"
CRD_FILE = "config/crd/full/serving.kserve.io_inferenceservices.yaml"


def kserve_crd() -> dict[str, Any]:
    if shutil.which("go") is None:
        pytest.skip("needs Go to fetch KServe's CRD from the module proxy")
    found = subprocess.run(["go", "mod", "download", "-json", KSERVE], capture_output=True, text=True, timeout=600, cwd="/tmp", check=False)
    if found.returncode != 0:
        pytest.skip(f"cannot download {KSERVE}: {found.stderr.strip()[:300]}")
    path = Path(json.loads(found.stdout)["Dir"]) / CRD_FILE
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: a large CRD, a fifth of the CPU


@pytest.fixture(scope="module")
def inference_service_crd(cluster: Any) -> Iterator[None]:
    api = client.ApiextensionsV1Api(cluster.api_client())
    body = kserve_crd()
    name = body["metadata"]["name"]
    created = False
    try:
        api.create_custom_resource_definition(body)
        created = True
    except client.ApiException as err:
        if err.status != 409:
            raise
    wait_for("InferenceService CRD established", lambda: any(
        c.type == "Established" and c.status == "True" for c in (api.read_custom_resource_definition(name).status.conditions or [])),
        timeout=60)
    try:
        yield
    finally:
        if created:
            api.delete_custom_resource_definition(name)


@pytest.mark.parametrize("extra", [[], ["--gpus", "1", "--replicas", "2", "--image-pull-secret", "regcred"]])
def test_rendered_inference_service_passes_kserve_schema(cluster: Any, namespace: str, inference_service_crd: None,
                                                         extra: list[str]) -> None:
    render = subprocess.run([*VPIPE, "serve", "--name", "mnist", "-n", namespace, "--pvc", "logs", "--target", "kserve",
                             *extra], capture_output=True, text=True, timeout=60, check=False)
    assert render.returncode == 0, render.stderr
    isvc = yaml.safe_load(render.stdout)
    custom = client.CustomObjectsApi(cluster.api_client())
    stored = custom.create_namespaced_custom_object("serving.kserve.io", "v1beta1", namespace, "inferenceservices", isvc,
                                                    dry_run="All", field_validation="Strict")
    predictor = stored["spec"]["predictor"]
    assert predictor["tensorflow"]["storageUri"] == "pvc://logs/export/mnist"
    assert predictor["tensorflow"]["runtimeVersion"] == ("2.16.1-gpu" if extra else "2.16.1")
    assert predictor["tensorflow"]["resources"] == isvc["spec"]["predictor"]["tensorflow"]["resources"]


def test_a_misplaced_field_is_refused_by_the_schema(cluster: Any, namespace: str, inference_service_crd: None) -> None:
    """The check has teeth: the same object with a field KServe does not know fails."""
    render = subprocess.run([*VPIPE, "serve", "--name", "mnist", "-n", namespace, "--pvc", "logs", "--target", "kserve"],
                            capture_output=True, text=True, timeout=60, check=False)
    isvc = yaml.safe_load(render.stdout)
    isvc["spec"]["predictor"]["tensorflow"]["modelBasePath"] = "/models"
    custom = client.CustomObjectsApi(cluster.api_client())
    with pytest.raises(client.ApiException) as err:
        custom.create_namespaced_custom_object("serving.kserve.io", "v1beta1", namespace, "inferenceservices", isvc,
                                               dry_run="All", field_validation="Strict")
    assert err.value.status in (400, 422) and "modelBasePath" in err.value.body
