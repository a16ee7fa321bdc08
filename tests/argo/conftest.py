"""Fixtures several Argo test modules share: the shipped manifests and the train-tf template in
the test's namespace (shipped: test_faults.py, test_lost_pod.py), the real node with the
pipeline's images (pipeline_node) and the pipeline's own objects shipped (pipelines_shipped,
which test_pipelines.py and test_terminate.py take as their `shipped`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.argo import support
from tests.helpers.argo_pipelines import TEMPLATES
from tests.storage.fixtures import POD_HDFS_NAME


@pytest.fixture
def shipped(cluster: Any, namespace: str, argo: Any) -> Any:
    api = cluster.api_client()
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    support.apply_objects(api, namespace, support.load("pipelines/argo/train-tf.yaml"))
    yield api
    support.delete_cluster_scoped(api, objects)


@pytest.fixture(scope="module")
def pipeline_node(node: Any, images: Any) -> Any:
    """The real node with the trainer, TensorBoard (tests/node) and TF Serving stand-in images."""
    node.import_image(images.archive("tfserving-standin"))
    return node


@pytest.fixture
def pipelines_shipped(cluster: Any, namespace: str, argo: Any, pipeline_node: Any, hdfs_for_pods: Any) -> Iterator[Any]:
    """manifests/base + manifests/argo and the pipeline's WorkflowTemplates in the namespace;
    the HDFS name resolving to the node's gateway for its pods. test_pipelines.py and
    test_terminate.py take it as their `shipped`."""
    api = cluster.api_client()
    objects = support.base_objects(namespace)
    support.apply_objects(api, namespace, objects)
    support.apply_objects(api, namespace, support.load(*(f"pipelines/argo/{t}.yaml" for t in TEMPLATES)))
    support.external_name(api, namespace, POD_HDFS_NAME, pipeline_node.gateway_ip, hdfs_for_pods.http_port)
    pvs: list[str] = []
    try:
        yield api, pvs
    finally:
        core = client.CoreV1Api(api)
        for pv in pvs:
            core.delete_persistent_volume(pv)
        support.delete_cluster_scoped(api, objects)
