"""Fixtures several integration test modules share: the lifecycle tests' cluster helper (kube)
and bound log PVC (log_pvc), and Argo's CRDs installed once (argo_crds)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.argo_crds import _install_crds
from tests.helpers.lifecycle import Cluster, make_log_pvc


@pytest.fixture(name="kube")
def kube_fixture(cluster: Any, namespace: str) -> Cluster:
    return Cluster(cluster, namespace)


@pytest.fixture(name="log_pvc")
def log_pvc_fixture(cluster: Any, namespace: str) -> Iterator[str]:
    yield from make_log_pvc(cluster, namespace)


@pytest.fixture(scope="session")
def argo_crds(cluster: Any) -> None:
    _install_crds(cluster)
