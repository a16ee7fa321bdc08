"""Fixtures for the local backend's tests: an HTTP file server (the code URL the real fetch
script downloads from), a backend per test whose pods' output is collected, the sample
dataset, and checks on the process table."""

from __future__ import annotations

import importlib.util
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.http_server import serve

from volcano_pipelines.backends.local import LocalBackend, LocalSession
from volcano_pipelines.volcano.status import FINAL_PHASES

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass
class FileServer:
    root: Path
    url: str  # ends with '/'


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


class Output:
    """The backend's output stream, kept for assertions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.lines: list[str] = []
        self._partial = ""

    def write(self, text: str) -> int:
        with self._lock:
            text = self._partial + text
            *complete, self._partial = text.split("\n")
            self.lines.extend(complete)
        return len(text)

    def flush(self) -> None:
        pass

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.lines)


@dataclass
class Local:
    backend: LocalBackend
    output: Output
    workdir: Path
    log_dir: Path
    data_dir: Path
    jobs: list[tuple[str, str]] = field(default_factory=list)


def processes_touching(root: Path) -> dict[int, str]:
    """Every process (but this one) whose working directory, command line or environment
    names `root`, with its command line: the leak check. Deliberately independent of the
    backend's own bookkeeping (its pod marker, process groups, shims), which it checks: a
    process of a test's pods works in, writes to or was told about the test's directory, even
    one that cleared its environment (its working directory is still there)."""
    needle = str(root).encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes()
            hits = needle in cmdline
            try:
                hits = hits or os.readlink(entry / "cwd").startswith(str(root))
                hits = hits or needle in (entry / "environ").read_bytes()
            except OSError:  # not ours to look into: only its command line counts
                pass
        except (OSError, IndexError):  # gone meanwhile
            continue
        if hits:
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode("utf-8", "replace")[:200]
    return found


def assert_no_leak(root: Path, settle_seconds: float = 0.0) -> None:
    """Fails when a process of `root` is still there (after waiting up to `settle_seconds`
    for it to go), and kills every one it found either way, so that one test's leak does not
    run on into the next ones."""
    deadline = time.monotonic() + settle_seconds
    left = processes_touching(root)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_touching(root)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    assert not left, f"processes left behind (now killed): {left}"


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


@dataclass
class Outcome:
    job: dict[str, Any]
    phases: list[str]  # every phase the watch saw, in order
    pods: list[dict[str, Any]]
    failed_pods: list[dict[str, Any]]
    linger: float | None
    session: LocalSession


def run_job(local: Local, manifest: dict[str, Any], *, timeout: float = 600,
            until: Callable[[dict[str, Any]], bool] | None = None) -> Outcome:
    """Submit and drive session.watch() the way the step's wait policy does: until the job's
    phase is final (or `until(job)` holds). `timeout` only guards against a hung test."""
    job, created = local.backend.submit(manifest)
    assert created
    local.jobs.append((job["metadata"]["namespace"], job["metadata"]["name"]))
    deadline = time.monotonic() + timeout
    phases: list[str] = []
    with local.backend.session(job, log_lines=20) as session:
        for seen in session.watch(lambda: 1.0):
            assert time.monotonic() < deadline, f"job still {phases[-1:]} after {timeout}s:\n{local.output.text()[-3000:]}"
            if seen is not None:
                job = seen
            phase = job["status"]["state"]["phase"]
            if not phases or phases[-1] != phase:
                phases.append(phase)
            if (until is not None and until(job)) or (until is None and phase in FINAL_PHASES):
                break
        return Outcome(job, phases, session.pods(), session.failed_pods(), session.linger_seconds(), session)


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def replica(local: Local, name: str, pod: str, attempt: int = 0) -> dict[str, Any]:
    return next(r for r in local.backend.replicas("default", name) if r["pod"] == pod and r["attempt"] == attempt)
