"""pytest plugin: the project's images (images/), built with podman for the tests that run
containers (marker `containers`), cached by content hash (images/build.py).

The base image is made with debootstrap (no registry can be pulled from here). The build
runs at collection time, outside any test's timeout, and only when such a test was selected;
tests/images/ci_prepare.sh does it ahead of the test run in CI. Where podman or debootstrap
is missing the tests skip, and fail in CI (tests/needs.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from images import build
from tests.needs import unavailable

_state: dict[str, object] = {}


def missing_tools() -> list[str]:
    return [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]


def archive_dir() -> Path:
    return build.cache_dir() / "archives"


def hdfs_native_choice() -> str:
    """The runtime image's hdfs-native for the tests: $VPIPE_HDFS_NATIVE (patched / stock), else
    the patched wheel when images/hdfs-native/ already has it built (cached), else PyPI's: its
    cold cargo build (minutes of both CPUs) is kept out of CI's cold run (docs/sync.md)."""
    chosen = os.environ.get("VPIPE_HDFS_NATIVE", "")
    if chosen in build.HDFS_NATIVE_CHOICES:
        return chosen
    try:
        cached = build.patched_hdfs_native().cached_wheel()  # type: ignore[attr-defined]
    except (OSError, SystemExit, subprocess.CalledProcessError):  # no Rust toolchain: no patched wheel
        return "stock"
    return "patched" if cached is not None else "stock"


def build_all(log=print) -> dict[str, build.Built]:
    return build.build(engine=build.Engine("podman"), base="debootstrap", save_dir=archive_dir(), log=log,
                       hdfs_native=hdfs_native_choice())


@dataclass(frozen=True)
class Images:
    """The built images and a way to run a command in one."""

    built: Mapping[str, build.Built]
    engine: build.Engine

    def tag(self, name: str) -> str:
        return self.built[name].tag

    def archive(self, name: str) -> Path:
        archive = self.built[name].archive
        assert archive is not None
        return archive

    def run(self, name: str, *args: str, env: Mapping[str, str] | None = None, entrypoint: str | None = None,
            volumes: Sequence[str] = (), user: str | None = None, timeout: float = 300,
            detach: bool = False) -> subprocess.CompletedProcess[str]:
        """`podman run --rm --network host` (the tests' servers listen on loopback)."""
        argv = [self.engine.command, "run", *self.engine.run_args(), "--network", "host"]
        argv += ["-d"] if detach else ["--rm"]
        for key, value in (env or {}).items():
            argv += ["--env", f"{key}={value}"]
        for volume in volumes:
            argv += ["--volume", volume]
        if entrypoint is not None:
            argv += ["--entrypoint", entrypoint]
        if user is not None:
            argv += ["--user", user]
        argv += [self.tag(name), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("containers") for item in items) or missing_tools():
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    log = (lambda msg: reporter.write_line(f"[tests.images] {msg}")) if reporter else print
    try:
        _state["built"] = build_all(log=log)
    except (subprocess.CalledProcessError, SystemExit) as err:  # reported by every test that needs them
        _state["error"] = f"building the images failed: {err}"


@pytest.fixture(scope="session")
def images() -> Images:
    missing = missing_tools()
    if missing:
        unavailable(f"building the images needs {', '.join(missing)} (tests/images/ci_prepare.sh installs them)")
    if "error" in _state:
        pytest.fail(str(_state["error"]), pytrace=False)
    built = _state.get("built") or build_all()
    return Images(built=built, engine=build.Engine("podman"))  # type: ignore[arg-type]
