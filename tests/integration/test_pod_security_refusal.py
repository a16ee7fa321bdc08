"""A namespace that enforces the restricted Pod Security level, against the real control plane
(kube-apiserver's PodSecurity admission, Volcano's controller creating the pods): a job built
without --pod-security restricted is refused, and the step says so in one line naming what to
do, not Volcano's dump of the API server's error (issue 42 item 19)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from volcano_pipelines.steps import Connection, train_tf

pytestmark = pytest.mark.integration


def test_pods_refused_by_pod_security_are_said_in_one_line(cluster: Any, namespace: str) -> None:
    core = client.CoreV1Api(cluster.api_client())
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    result = train_tf("psa", image="trainer:test", code_url="https://example.com/code/", workers=1, ps=1,
                      namespace=namespace, connection=Connection(str(cluster.kubeconfig)), timeout=240)
    assert not result.succeeded
    message = result.message or ""
    assert "\n" not in message and "StatusError" not in message, message
    assert (f'no pod ever ran: namespace {namespace} enforces Pod Security "restricted" and refused the job\'s pods '
            in message), message
    assert "rerun with --pod-security restricted (pipelines: the input pod_security" in message, message
