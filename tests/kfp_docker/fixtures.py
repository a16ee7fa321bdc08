"""pytest plugin (loaded by tests/conftest.py): KFP pipelines and components run by kfp.local
in real containers of the runtime image (tests/kfp_docker/harness.py), for tests marked
``kfpdocker``.

``podman_docker_host`` (session) is the podman service's DOCKER_HOST URL. ``kfp_docker`` (per
test) initialises kfp.local with its DockerRunner and a pipeline root of the test's own, and
yields a ``KfpDocker``: set ``.mounts`` (docker ``Mount`` objects: the kubeconfig, the data
directory) and ``.environment`` before running a pipeline; containers use the host network
(the control plane and HDFS listen on loopback). When podman, runc or the ``docker`` package
is missing, tests skip with one line, and fail in CI (tests/needs.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.kfp_docker.harness import container_runner, podman_missing, podman_service
from tests.needs import unavailable


@pytest.fixture(scope="session")
def podman_docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    missing = podman_missing()
    if missing:
        unavailable(f"kfp.local's DockerRunner needs {', '.join(missing)}")
    with podman_service(tmp_path_factory.mktemp("podman-service")) as url:
        yield url


@dataclass
class KfpDocker:
    root: Path  # the pipeline root: task outputs land under it
    mounts: list[Any] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    exit_codes: list[int] = field(default_factory=list)  # of every container run, in order

    def raise_on_error(self, value: bool) -> None:
        """kfp.local raises RuntimeError when a task fails (True) or logs it (False, the default)."""
        from kfp import local

        local.init(runner=local.DockerRunner(), pipeline_root=str(self.root), raise_on_error=value)

    def settings(self) -> dict[str, Any]:
        return {"network_mode": "host", "mounts": list(self.mounts), "environment": dict(self.environment)}


@pytest.fixture
def kfp_docker(podman_docker_host: str, images: Any, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[KfpDocker]:
    from kfp import local
    from kfp.local import config, docker_task_handler, executor_input_utils

    from tests.helpers.kfp_local import drop_unset_optional_inputs

    images.tag("runtime")  # built (or reused) before the first container starts
    monkeypatch.setenv("DOCKER_HOST", podman_docker_host)
    state = KfpDocker(root=tmp_path / "kfp-outputs")
    monkeypatch.setattr(executor_input_utils, "executor_input_to_dict", drop_unset_optional_inputs())
    monkeypatch.setattr(docker_task_handler, "run_docker_container",
                        container_runner(state.settings, state.exit_codes.append))
    # The runtime image runs as uid 1000, as in a KFP pod; kfp.local makes the task output
    # directories on the host with the process's umask: let the container write into them.
    old_umask = os.umask(0)
    state.root.mkdir(mode=0o777)
    local.init(runner=local.DockerRunner(), pipeline_root=str(state.root), raise_on_error=False)
    try:
        yield state
    finally:
        os.umask(old_umask)
        config.LocalExecutionConfig.instance = None
