"""Fixtures for the local backend's tests: an HTTP file server (the code URL the real fetch
script downloads from), a backend per test whose pods' output is collected, the sample
dataset, and checks on the process table (the helpers themselves: tests/helpers/local_jobs.py)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.http_server import serve
from tests.helpers.local_jobs import EXAMPLES, FileServer, Local, Output, assert_no_leak

from volcano_pipelines.backends.local import LocalBackend


def _serve(root: Path) -> Iterator[FileServer]:
    with serve(root) as server:
        yield FileServer(root, server.base + "/")


@pytest.fixture(scope="session")
def examples_server() -> Iterator[FileServer]:
    """The repository's examples/ directory as a directory listing."""
    yield from _serve(EXAMPLES)


@pytest.fixture
def code_server(tmp_path: Path) -> Iterator[FileServer]:
    """An empty directory served over HTTP; tests write their run.sh into it."""
    root = tmp_path / "served"
    root.mkdir()
    yield from _serve(root)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/data/make_dataset.py's sample set (TFRecord and CSV shards)."""
    spec = importlib.util.spec_from_file_location("make_dataset", EXAMPLES / "data" / "make_dataset.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("dataset")
    module.make_dataset(str(out))
    return out


@pytest.fixture
def local(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Local]:
    """A backend of its own per test. At the end no process may be left that works in,
    names or was told about the test's directory (the pods' working directories, logs and
    data are all under it)."""
    data_dir = request.getfixturevalue("dataset") if "dataset" in request.fixturenames else tmp_path / "data"
    Path(data_dir).mkdir(parents=True, exist_ok=True)  # a data volume named explicitly must exist
    output = Output()
    backend = LocalBackend(tmp_path / "work", data_dir=data_dir, log_dir=tmp_path / "logs", output=output,
                           grace_seconds=5)
    env = Local(backend, output, tmp_path / "work", tmp_path / "logs", Path(data_dir))
    yield env
    backend.close()
    assert_no_leak(tmp_path)


