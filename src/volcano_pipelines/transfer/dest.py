"""The destination: a mounted directory (a GlusterFS-backed PVC in a pod). Listing,
safe directory creation (never through a symlink), a lock, and error classification."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass

from volcano_pipelines.errors import ClusterError, WorkFailed
from volcano_pipelines.transfer.plan import RESERVED_DIR, Entry, is_temp_name

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
DENIED_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS)


class DestinationFull(WorkFailed):
    """ENOSPC / EDQUOT: the volume is full. Exit 1 (the work failed; see docs/sync.md)."""


class DestinationDenied(ClusterError):
    """EACCES / EPERM / EROFS: the volume refuses writes. Exit 3 (permission problem)."""


class UnsafePath(Exception):
    """Writing here would leave the destination (a symlink or non-directory on the way)."""


def classify_os_error(err: OSError, what: str) -> Exception:
    if err.errno in FULL_ERRNOS:
        return DestinationFull(f"destination full while {what}: {err.strerror}")
    if err.errno in DENIED_ERRNOS:
        return DestinationDenied(f"destination not writable while {what}: {err.strerror}")
    return err


@dataclass
class DestListing:
    files: list[Entry]
    temps: list[str]


def _scan_dir(root: str, rel_dir: str) -> tuple[list[Entry], list[str], list[str]]:
    files: list[Entry] = []
    temps: list[str] = []
    subdirs: list[str] = []
    with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
        for de in it:
            rel = f"{rel_dir}/{de.name}" if rel_dir else de.name
            if rel == RESERVED_DIR:
                continue
            if is_temp_name(de.name):
                temps.append(rel)
            elif de.is_dir(follow_symlinks=False):
                subdirs.append(rel)
            elif de.is_file(follow_symlinks=False):
                s = de.stat(follow_symlinks=False)
                files.append(Entry(rel, s.st_size, s.st_mtime_ns // 1_000_000))
            else:
                files.append(Entry(rel, -1, 0))
    return files, temps, subdirs


def scan(root: str, workers: int = 8) -> DestListing:
    """Regular files (size, mtime ms) under root, not following symlinks. Symlinks and
    other non-regular entries are reported with size -1 so they never look up to date.
    Directories are read in parallel: on a FUSE mount each readdir is a round trip."""
    listing = DestListing([], [])
    if not os.path.isdir(root):
        return listing
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scan") as pool:
        pending = {pool.submit(_scan_dir, root, "")}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                files, temps, subdirs = future.result()
                listing.files.extend(files)
                listing.temps.extend(temps)
                pending.update(pool.submit(_scan_dir, root, d) for d in subdirs)
    return listing


class DirMaker:
    """Creates parent directories component by component, refusing symlinks and
    non-directories on the way, so nothing is ever written outside the root."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._ok: set[str] = {""}
        self._lock = threading.Lock()

    def ensure(self, rel_dir: str) -> str:
        if rel_dir in self._ok:
            return os.path.join(self.root, rel_dir) if rel_dir else self.root
        parts = rel_dir.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub in self._ok:
                continue
            path = os.path.join(self.root, sub)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                try:
                    os.mkdir(path, 0o755)
                except FileExistsError:
                    pass
                st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePath(f"{sub} is a symbolic link in the destination (not followed)")
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafePath(f"{sub} exists in the destination and is not a directory")
            with self._lock:
                self._ok.add(sub)
        return os.path.join(self.root, rel_dir)

    def is_safe_parent(self, rel_path: str) -> bool:
        """True when every directory above rel_path is a real directory (no symlink)."""
        if "/" not in rel_path:
            return True
        parts = rel_path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub in self._ok:
                continue
            try:
                st = os.lstat(os.path.join(self.root, sub))
            except FileNotFoundError:
                return False
            if not stat.S_ISDIR(st.st_mode):
                return False
        return True


class DestLock:
    """An exclusive lock on <root>/.vpipe/lock so two syncs never share a destination."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.fd: int | None = None

    def __enter__(self) -> DestLock:
        reserved = os.path.join(self.root, RESERVED_DIR)
        try:
            os.makedirs(reserved, exist_ok=True)
            self.fd = os.open(os.path.join(reserved, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise classify_os_error(err, f"preparing {reserved}") from err
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(self.fd)
            self.fd = None
            raise WorkFailed(f"another sync holds the lock on {self.root} ({RESERVED_DIR}/lock)") from err
        except OSError as err:
            if err.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
