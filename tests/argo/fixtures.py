"""pytest plugin: Argo Workflows' controller on the session's control plane, its step pods on
the real node.

Loaded by ``tests/conftest.py``. ``argo`` (session) yields a started
``tests.argo.launcher.ArgoController`` with the argoexec image and the project's runtime and
TF trainer images imported into the real node, and every project image's entrypoint in the
controller's ConfigMap. Needs what ``real_node`` and ``images`` need, plus Go for the build;
when it cannot be had, tests skip with one line, and fail in CI (``tests/needs.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.argo import build
from tests.argo.launcher import ArgoController
from tests.needs import unavailable

# The images the controller's tests run (the others are listed in the ConfigMap only).
IMPORTED = ("runtime", "trainer-tf")

_build_error: list[str] = []


@pytest.hookimpl(trylast=True)  # after -m / -k selection: build only when a selected test needs it
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any("argo" in getattr(item, "fixturenames", ()) for item in items) or build.missing_tools():
        return
    if build.is_built():
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    log = (lambda msg: reporter.write_line(f"[tests.argo] {msg}")) if reporter else print
    try:
        build.build(log=log)
    except Exception as err:  # noqa: BLE001 - reported by every test that needs Argo
        _build_error.append(f"building Argo failed: {err}")


@pytest.fixture(scope="session")
def argo(cluster: Any, real_node: Any, images: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ArgoController]:
    missing = build.missing_tools()
    if missing:
        unavailable(f"no Argo controller: {', '.join(missing)} missing (tests/cluster/ci_prepare.sh)")
    if _build_error:
        pytest.fail(_build_error[0], pytrace=False)
    artifacts = build.build(log=lambda msg: None)  # normally done at collection time
    real_node.import_image(artifacts.executor_archive)
    controller = ArgoController(state_dir=tmp_path_factory.mktemp("argo"), artifacts=artifacts,
                                kubeconfig=cluster.kubeconfig, log=lambda msg: None)
    for name in sorted(images.built):
        controller.add_image(images.archive(name))
        if name in IMPORTED:
            real_node.import_image(images.archive(name))
    controller.start()
    try:
        yield controller
    finally:
        controller.stop()
