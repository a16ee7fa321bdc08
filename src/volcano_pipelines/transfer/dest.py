"""The destination: a mounted directory (a GlusterFS-backed PVC in a pod). Listing,
safe directory creation (never through a symlink), a lock, and error classification."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import logging
import os
import stat
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from volcano_pipelines.errors import ClusterError, WorkFailed
from volcano_pipelines.transfer.plan import RESERVED_DIR, Entry, is_temp_name, temp_name

log = logging.getLogger(__name__)

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


# A directory listing is reused from the scan cache only while the directory's mtime is
# unchanged and was already this old when it was read: a change in the same clock tick
# as the recorded one (or from a client whose clock is slightly behind) cannot hide.
RACY_NS = 2_000_000_000
SCAN_CACHE = "scan-cache.json"
_CACHE_FORMAT = "vpipe-scan-cache/1"


@dataclass(frozen=True)
class DirRecord:
    """One directory as read: its mtime (taken before the readdir), when it was read, and
    its regular files (name, size, mtime ms), other entries (size -1), temporary files
    and subdirectories."""

    mtime_ns: int
    scanned_ns: int
    files: tuple[tuple[str, int, int], ...]
    temps: tuple[str, ...]
    subdirs: tuple[str, ...]

    @property
    def racy(self) -> bool:
        """Read within RACY_NS of the directory's last change: never reused."""
        return self.scanned_ns - self.mtime_ns < RACY_NS

    def reusable(self, mtime_ns: int) -> bool:
        return mtime_ns == self.mtime_ns and not self.racy


@dataclass
class DestListing:
    files: list[Entry]
    temps: list[str]
    dirs: dict[str, DirRecord] = field(default_factory=dict)  # rel dir ("" = root) -> record
    reused: set[str] = field(default_factory=set)  # directories taken from the scan cache (no readdir)

    @property
    def dirs_read(self) -> int:
        return len(self.dirs) - len(self.reused)


def _read_dir(root: str, rel_dir: str) -> DirRecord:
    path = os.path.join(root, rel_dir) if rel_dir else root
    scanned_ns = time.time_ns()
    # Before the readdir, so a change after it moves the mtime away from the saved one.
    mtime_ns = fresh_dir_mtime(path) or 0
    files: list[tuple[str, int, int]] = []
    temps: list[str] = []
    subdirs: list[str] = []
    with os.scandir(path) as it:
        for de in it:
            if not rel_dir and de.name == RESERVED_DIR:
                continue
            if is_temp_name(de.name):
                temps.append(de.name)
            elif de.is_dir(follow_symlinks=False):
                subdirs.append(de.name)
            elif de.is_file(follow_symlinks=False):
                st = de.stat(follow_symlinks=False)
                files.append((de.name, st.st_size, st.st_mtime_ns // 1_000_000))
            else:
                files.append((de.name, -1, 0))
    return DirRecord(mtime_ns, scanned_ns, tuple(files), tuple(temps), tuple(subdirs))


class _StatxTime(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_int64), ("nsec", ctypes.c_uint32), ("_pad", ctypes.c_int32)]


class _Statx(ctypes.Structure):
    _fields_ = [
        ("mask", ctypes.c_uint32), ("blksize", ctypes.c_uint32), ("attributes", ctypes.c_uint64),
        ("nlink", ctypes.c_uint32), ("uid", ctypes.c_uint32), ("gid", ctypes.c_uint32),
        ("mode", ctypes.c_uint16), ("_pad0", ctypes.c_uint16), ("ino", ctypes.c_uint64),
        ("size", ctypes.c_uint64), ("blocks", ctypes.c_uint64), ("attributes_mask", ctypes.c_uint64),
        ("atime", _StatxTime), ("btime", _StatxTime), ("ctime", _StatxTime), ("mtime", _StatxTime),
        ("_rest", ctypes.c_uint64 * 20),
    ]


_AT_FDCWD, _AT_SYMLINK_NOFOLLOW, _AT_STATX_FORCE_SYNC = -100, 0x100, 0x2000
_STATX_TYPE_MODE_MTIME = 0x1 | 0x2 | 0x40
_statx: Any = getattr(ctypes.CDLL(None, use_errno=True), "statx", None) if sys.platform == "linux" else None


def fresh_dir_mtime(path: str) -> int | None:
    """A directory's mtime in ns asked of the file system itself, or None if it is not a
    directory. A FUSE client keeps attributes for its attribute timeout (1 s by default
    for GlusterFS), so a plain lstat can miss a change just made by another client;
    statx(AT_STATX_FORCE_SYNC) makes the kernel ask the file system again."""
    if _statx is not None:
        buf = _Statx()
        if _statx(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW | _AT_STATX_FORCE_SYNC, _STATX_TYPE_MODE_MTIME, ctypes.byref(buf)) == 0:
            if not stat.S_ISDIR(buf.mode):
                return None
            return int(buf.mtime.sec * 1_000_000_000 + buf.mtime.nsec)
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
            raise OSError(err, os.strerror(err), path)
    st = os.lstat(path)
    return st.st_mtime_ns if stat.S_ISDIR(st.st_mode) else None


def _visit(root: str, rel_dir: str, cache: dict[str, DirRecord]) -> tuple[DirRecord | None, bool]:
    """The directory's record, and whether it came from the cache (one stat, no readdir).
    None for a subdirectory that is gone (removed while the scan ran): nothing to list."""
    try:
        cached = cache.get(rel_dir)
        if cached is not None:
            mtime_ns = fresh_dir_mtime(os.path.join(root, rel_dir) if rel_dir else root)
            if mtime_ns is not None and cached.reusable(mtime_ns):
                return cached, True
        return _read_dir(root, rel_dir), False
    except (FileNotFoundError, NotADirectoryError):
        if not rel_dir:
            raise
        return None, False


def scan(root: str, workers: int = 8, cache: dict[str, DirRecord] | None = None) -> DestListing:
    """Regular files (size, mtime ms) under root, not following symlinks. Symlinks and
    other non-regular entries are reported with size -1 so they never look up to date.
    Directories are read in parallel: on a FUSE mount each readdir is a round trip. With
    a cache (see `load_scan_cache`), a directory whose mtime has not moved is not read
    again: files created, renamed or deleted in it would have moved it."""
    listing = DestListing([], [])
    if not os.path.isdir(root):
        return listing
    cache = cache or {}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scan") as pool:
        pending = {pool.submit(_visit, root, "", cache): ""}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                rel_dir = pending.pop(future)
                record, reused = future.result()
                if record is None:
                    continue
                listing.dirs[rel_dir] = record
                if reused:
                    listing.reused.add(rel_dir)
                prefix = f"{rel_dir}/" if rel_dir else ""
                listing.files.extend(Entry(prefix + name, size, mtime) for name, size, mtime in record.files)
                listing.temps.extend(prefix + name for name in record.temps)
                for name in record.subdirs:
                    sub = prefix + name
                    pending[pool.submit(_visit, root, sub, cache)] = sub
    return listing


def load_scan_cache(root: str) -> dict[str, DirRecord]:
    """The directory records saved by the last run, or {} when there are none or they
    cannot be read (the scan then reads every directory)."""
    path = os.path.join(root, RESERVED_DIR, SCAN_CACHE)
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
        if data.get("format") != _CACHE_FORMAT:
            return {}
        return {
            rel: DirRecord(int(m), int(t), tuple((str(n), int(z), int(x)) for n, z, x in f), tuple(tmp), tuple(sub))
            for rel, (m, t, f, tmp, sub) in data["dirs"].items()
        }
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        log.warning("ignoring the scan cache %s (%s): every directory will be read", path, err)
        return {}


def cacheable(listing: DestListing) -> dict[str, DirRecord]:
    """The records worth saving. Any record read stat-before-readdir stays safe to keep:
    if this run (or anyone) changed the directory since, its mtime no longer matches and
    it is read again. Racy ones are never reused, so they are not kept."""
    return {rel: rec for rel, rec in listing.dirs.items() if not rec.racy}


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is written (a write may be short)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_file_atomic(path: str, data: bytes) -> None:
    """Replace a small file under .vpipe/ as a whole: a temporary sibling, fsynced, then
    renamed; the temporary file is removed when anything fails."""
    parent, base = os.path.split(path)
    tmp = os.path.join(parent, temp_name(base, os.urandom(8).hex()))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_scan_cache(root: str, records: dict[str, DirRecord]) -> None:
    """Write the records for the next run. A failure only costs that run a full scan, so
    it is logged, not raised."""
    path = os.path.join(root, RESERVED_DIR, SCAN_CACHE)
    dirs = {rel: [r.mtime_ns, r.scanned_ns, r.files, r.temps, r.subdirs] for rel, r in sorted(records.items())}
    body = json.dumps({"format": _CACHE_FORMAT, "dirs": dirs}, separators=(",", ":")).encode()
    try:
        remove_temp_files(os.path.dirname(path))
        write_file_atomic(path, body)
    except OSError as err:
        log.warning("could not save the scan cache %s (%s): the next run reads every directory", path, err)


def remove_temp_files(directory: str) -> None:
    """Temporary files an interrupted write left in one of sync's own directories."""
    for name in os.listdir(directory):
        if is_temp_name(name):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


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


LOCK_FILE = "lock"
# A plan's probe (`lock_held`) holds a shared lock for a few microseconds; a sync taking
# the lock at that instant tries again rather than report a sync that is not there.
_LOCK_TRIES = 5
_LOCK_RETRY_S = 0.02


def lock_held(root: str) -> bool:
    """True while a live sync holds <root>/.vpipe/lock. Creates nothing (a dry run takes no
    lock). A temporary file in the destination is a leftover of an interrupted run only
    when this is False: a running sync is writing it. The lock dies with its process, so
    a killed sync never looks live."""
    try:
        fd = os.open(os.path.join(root, RESERVED_DIR, LOCK_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file (never synced), or unreadable: no sync can be told apart
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: probes do not block each other
    except BlockingIOError:
        return True
    except OSError:
        return False  # no flock on this file system: DestLock runs without one too
    finally:
        os.close(fd)  # also releases the probe's own lock
    return False


def another_sync(root: str) -> WorkFailed:
    return WorkFailed(f"another sync holds the lock on {root} ({RESERVED_DIR}/{LOCK_FILE}): it is still running")


class DestLock:
    """An exclusive lock on <root>/.vpipe/lock so two syncs never share a destination."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.fd: int | None = None

    def __enter__(self) -> DestLock:
        reserved = os.path.join(self.root, RESERVED_DIR)
        try:
            os.makedirs(reserved, exist_ok=True)
            self.fd = os.open(os.path.join(reserved, LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise classify_os_error(err, f"preparing {reserved}") from err
        for attempt in range(1, _LOCK_TRIES + 1):
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as err:
                if attempt < _LOCK_TRIES:
                    time.sleep(_LOCK_RETRY_S)
                    continue
                os.close(self.fd)
                self.fd = None
                raise another_sync(self.root) from err
            except OSError as err:
                if err.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                break
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
