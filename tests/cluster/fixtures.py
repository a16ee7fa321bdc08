"""pytest plugin: a real Kubernetes + Volcano cluster for integration tests.

Loaded by ``tests/conftest.py``. The session fixture ``cluster`` picks, in order:

1. the kubeconfig named by ``VPIPE_TEST_KUBECONFIG`` (an existing cluster with Volcano);
2. the local control plane (``tests/cluster/launcher.py``), building the binaries first
   if needed (a cold build takes a long while; ``tests/cluster/ci_prepare.sh`` does it
   ahead of time in CI).

When neither can be had (no named kubeconfig and no Go), tests that need a cluster skip
with a one-line reason, and fail in CI (``tests/needs.py``). There is no ``kind`` path:
its pods would lack the kwok behaviour labels (``tests/cluster/behaviour.py``) the tests
rely on, and no one could run it here.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from tests.cluster import build
from tests.cluster.launcher import ControlPlane
from tests.needs import unavailable

KUBECONFIG_ENV = "VPIPE_TEST_KUBECONFIG"


@dataclass
class Cluster:
    """What a test gets: a kubeconfig, API clients, and (local only) the control plane."""

    kubeconfig: Path
    kind: str  # "external" | "local"
    plane: ControlPlane | None = None

    def api_client(self, impersonate: str | None = None) -> Any:
        """A kubernetes ApiClient; ``impersonate`` (e.g.
        ``system:serviceaccount:NS:NAME``) makes every request as that user, to prove a
        Role is enough (RBAC is on in the local control plane)."""
        from kubernetes import config

        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        if impersonate:
            api.set_default_header("Impersonate-User", impersonate)
        return api

    def require_local(self) -> ControlPlane:
        """For tests that restart the apiserver or read its audit log."""
        if self.plane is None:
            unavailable(f"needs the local control plane (this run uses a {self.kind} cluster)")
        return self.plane


def _go_available() -> bool:
    return build.go_available()


_build_error: list[str] = []


@pytest.hookimpl(trylast=True)  # after `-m` / `-k` deselection: build only if still needed
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the control plane before the first test runs, outside any per-test timeout,
    and only when integration tests were selected and no other cluster was named."""
    if not any(item.get_closest_marker("integration") for item in items):
        return
    if os.environ.get(KUBECONFIG_ENV) or not _go_available():
        return
    if not build.is_built():
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        log = (lambda msg: reporter.write_line(f"[tests.cluster] {msg}")) if reporter else print
        log("building the local control plane (cold builds take tens of minutes)")
        try:
            build.build(log=log)
        except Exception as err:  # noqa: BLE001 - reported by every test that needs the cluster
            # A broken build must fail the integration tests loudly, not skip them, and
            # must not stop the rest of the suite from running.
            _build_error.append(f"building the local control plane failed: {err}")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    named = os.environ.get(KUBECONFIG_ENV)
    if named:
        yield Cluster(Path(named), "external")
        return
    if not _go_available():
        unavailable(f"no cluster: set {KUBECONFIG_ENV} or install Go to build tests/cluster (tests/cluster/ci_prepare.sh)")
    if _build_error:
        pytest.fail(_build_error[0], pytrace=False)
    bin_dir = build.build()  # normally a no-op: built at collection time or by ci_prepare.sh
    state_dir = tmp_path_factory.mktemp("control-plane")
    plane = ControlPlane(state_dir=state_dir, bin_dir=bin_dir, log=lambda msg: None)
    plane.start()
    try:
        yield Cluster(plane.kubeconfig, "local", plane)
    finally:
        plane.stop()


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (its objects go with it)."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"vpipe-test": "true"}}})
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except client.ApiException as err:
            if err.status != 404:
                raise
