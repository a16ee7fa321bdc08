"""The build cache the test harnesses share (tests/cluster/build.py, tests/node/build.py,
tests/argo/build.py): one directory per key of pinned inputs under the cache root, built at most
once at a time and never seen half made.

* `PinHash`: the key, the first 16 hex digits of a SHA-256 over the inputs that decide what is
  built (files under a label, settings, tool versions), fed in the order the caller chooses;
* `cached_build(directory, build_into)`: the finished directory, built first unless it is
  complete: under an exclusive lock on `.build.lock` beside it (a CI prepare step and a test
  session may overlap; whoever waited finds the finished directory and builds nothing),
  `build_into` fills `<directory>.partial` (emptied first), the `.complete` marker is written
  and the staging directory renamed onto `directory`. A build that fails leaves `directory`
  as it was (absent, or an incomplete one the next build replaces) and its staging removed.

Standard library only: the harnesses run as scripts (`python -m tests.cluster build`, the CI
prepare steps) before the package's dependencies are installed.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

__all__ = ["COMPLETE_MARKER", "LOCK_NAME", "PinHash", "cached_build", "is_complete", "staging_dir"]

COMPLETE_MARKER = ".complete"  # written last into a finished directory
LOCK_NAME = ".build.lock"  # beside the cached directories: one build at a time per cache


class PinHash:
    """A cache key: SHA-256 over labelled inputs, shortened to 16 hex digits."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()

    def file(self, path: Path, label: str) -> None:
        """A file's bytes, under a label (its name or a path relative to a root)."""
        self._digest.update(f"{label}\0".encode())
        self._digest.update(path.read_bytes())

    def data(self, data: str | bytes) -> None:
        """A setting or a tool's version."""
        self._digest.update(data.encode() if isinstance(data, str) else data)

    def key(self) -> str:
        return self._digest.hexdigest()[:16]


def staging_dir(directory: Path) -> Path:
    return directory.with_name(directory.name + ".partial")


def is_complete(directory: Path, contents: Callable[[Path], bool] = lambda _: True) -> bool:
    """The marker is there and `contents` (what the caller expects inside) agrees."""
    return (directory / COMPLETE_MARKER).exists() and contents(directory)


def cached_build(directory: Path, build_into: Callable[[Path], None], *,
                 contents: Callable[[Path], bool] = lambda _: True, force: bool = False,
                 log: Callable[[str], None] = print, up_to_date: str = "up to date") -> Path:
    """`directory`, built by `build_into(staging)` unless it is complete already (`force`:
    built again). `up_to_date` is logged, with the directory, when nothing is built."""
    if is_complete(directory, contents) and not force:
        log(f"{up_to_date}: {directory}")
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / LOCK_NAME, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(directory, contents) and not force:
            log(f"{up_to_date}: {directory}")
            return directory
        staging = staging_dir(directory)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            build_into(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        (staging / COMPLETE_MARKER).write_text("")
        if directory.exists():
            shutil.rmtree(directory)
        staging.rename(directory)
    return directory
