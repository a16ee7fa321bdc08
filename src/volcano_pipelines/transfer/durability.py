"""`--durability`: when a copied file's data is forced to stable storage, always before it
gets its final name (docs/sync.md, "Durability").

- `file`: each transfer thread fsyncs its temporary file, then renames it.
- `batch`: a transfer thread hands the written temporary file (descriptor still open) to
  the committer and goes on with the next file. The committer takes every file handed over
  since its last pass, flushes them together - one `syncfs` where the destination's file
  system honours it, otherwise a parallel pass of fsyncs (GlusterFS's FUSE client forwards
  each fsync to the brick, and its `syncfs` flushes nothing there) - then renames them.
- `none`: no fsync; the rename still makes each file appear whole to every reader while
  the machines stay up, but after a crash of the brick's machine a file may be empty or
  short under its final name (what rclone and cp leave too).

Every mode that promises anything fsyncs the directories that received renames at the
end of the run."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import queue
import resource
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_DURABILITY", "MODES", "Committer", "FlushBehind", "fs_type", "syncfs", "syncfs_honoured"]
log = logging.getLogger(__name__)

MODES = ("file", "batch", "none")
DEFAULT_DURABILITY = "batch"

# File systems whose syncfs(2) writes every dirty file of the file system to stable
# storage. Not FUSE: the kernel forwards syncfs only to virtiofs daemons, so on a
# GlusterFS mount it returns 0 having flushed nothing on the brick (measured with
# `gluster volume profile`: no FSYNC reaches the brick; docs/sync.md).
SYNCFS_HONOURED = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "tmpfs", "overlay"})
# Files handed over but not yet renamed hold a descriptor each: bounded.
MAX_PENDING = 512
FLUSH_WORKERS = 16


def fs_type(path: str) -> str:
    """The type of the file system `path` lies on (/proc/self/mounts, longest mount point
    that contains it); "" when unknown."""
    real = os.path.realpath(path)
    best, kind = "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, fields[2]
    except OSError:
        return ""
    return kind


def syncfs_honoured(path: str) -> bool:
    return fs_type(path) in SYNCFS_HONOURED


_libc: Any = None


def syncfs(fd: int) -> None:
    """syncfs(2): write the dirty data of the file system `fd` lies on."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


# How often an early flush waiting for its turn looks whether its file was finished meanwhile.
TURN_POLL_SECONDS = 0.01


def _max_pending() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(8, min(MAX_PENDING, (soft // 4) if soft > 0 else MAX_PENDING))


@dataclass
class Pending:
    fd: int
    tmp: str
    final: str
    outcome: Any  # the Outcome to report once renamed
    future: Future[Any]


class Committer:
    """The `batch` mode's flusher: `submit` a written temporary file (its descriptor
    open); it is flushed with the others handed over meanwhile, renamed, closed, and its
    future resolves to `outcome` - or to `failed(outcome, error)` when that went wrong
    (the temporary file is then removed). `close` commits what is left and stops."""

    def __init__(
        self,
        use_syncfs: bool,
        failed: Callable[[Any, OSError], Any],
        renamed: Callable[[str], None],
        done: Callable[[Any], None],
    ) -> None:
        self.use_syncfs = use_syncfs
        self.failed = failed
        self.renamed = renamed
        self.done = done
        self.passes = 0  # flush passes made (reported in the debug log)
        self._queue: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(_max_pending())
        self._pool = ThreadPoolExecutor(FLUSH_WORKERS, thread_name_prefix="sync-commit")
        self._thread = threading.Thread(target=self._loop, name="sync-committer", daemon=True)
        self._thread.start()

    def submit(self, fd: int, tmp: str, final: str, outcome: Any) -> Future[Any]:
        """Takes over `fd` (closes it) and `tmp` (renames or removes it)."""
        self._slots.acquire()  # back-pressure: at most MAX_PENDING open descriptors
        future: Future[Any] = Future()
        self._queue.put(Pending(fd, tmp, final, outcome, future))
        return future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._pool.shutdown(wait=True)

    def _loop(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while True:  # everything handed over meanwhile joins this pass
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            self._flush(batch)

    def _flush(self, batch: list[Pending]) -> None:
        self.passes += 1
        need_fsync = True
        if self.use_syncfs:
            try:
                syncfs(batch[0].fd)
                need_fsync = False
            except OSError as err:
                log.warning("syncfs failed (%s); fsyncing each file instead", err)
        list(self._pool.map(lambda p: self._commit(p, need_fsync), batch))

    def _commit(self, p: Pending, need_fsync: bool) -> None:
        fd = p.fd
        try:
            try:
                if need_fsync:
                    os.fsync(fd)
                os.close(fd)
                fd = -1
                os.replace(p.tmp, p.final)
            except OSError as err:
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                try:
                    os.unlink(p.tmp)
                except OSError as gone:
                    if gone.errno != errno.ENOENT:
                        log.warning("could not remove temporary file %s: %s", p.tmp, gone)
                result = self.failed(p.outcome, err)
            else:
                self.renamed(os.path.dirname(p.final))
                result = p.outcome
        except BaseException as err:  # noqa: BLE001 - a waiting transfer must always get an answer
            p.future.set_exception(err)
            self._slots.release()
            return
        self._slots.release()
        self.done(result)
        p.future.set_result(result)


class FlushBehind:
    """fdatasync of `fd` each time `every` more bytes were written, in a thread beside the
    copy, so that the destination (on GlusterFS: the brick, through one FSYNC) puts the earlier
    bytes on disk while the copy goes on and the final flush before the rename has only the
    last stretch left. A flush that comes due while one runs is one more flush after it, not
    one per mark. The file's last bytes (`size` in all) start none: the final flush covers
    them, after the transfer thread has handed the file on (for `batch` in the committer,
    beside the next file's copy, instead of in the thread, holding its read slot).
    `finish()` waits for the flush in flight (the descriptor is closed after it) and skips one
    not yet started: the final flush covers it.

    `turn`: a lock shared by the run's files, so that their early flushes run one at a time.
    On a FUSE mount an fsync holds the file's inode lock until the server answers, and the
    file's own writes wait for it; files copied side by side reach their marks together, and
    flushing all of them at once stalled every writer of the run. One at a time, the others
    go on writing (docs/sync.md, issue 44)."""

    def __init__(self, fd: int, every: int, size: int, turn: threading.Lock | None = None) -> None:
        self._fd, self._every, self._left = fd, every, size
        self._turn = turn if turn is not None else threading.Lock()
        self._lock = threading.Lock()
        self._since = 0
        self._due = threading.Event()
        self._done = False
        self._error: OSError | None = None
        self._thread: threading.Thread | None = None

    def wrote(self, n: int) -> None:
        """`n` more bytes are in the file (any range thread). Raises the OSError of a flush
        that failed: the copy stops at the first."""
        if self._error is not None:
            raise self._error
        with self._lock:
            self._since += n
            self._left -= n
            if self._since < self._every or self._left <= 0:
                return
            self._since = 0
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="flush-behind", daemon=True)
                self._thread.start()
        self._due.set()

    def _run(self) -> None:
        while True:
            self._due.wait()
            self._due.clear()
            if self._done:
                return
            if not self._take_turn():
                return
            try:
                os.fdatasync(self._fd)
            except OSError as err:
                self._error = err
                return
            finally:
                self._turn.release()

    def _take_turn(self) -> bool:
        """Wait for the other files' early flush. False, the turn not held, when `finish()`
        came first: the final flush covers this one."""
        while True:
            if self._turn.acquire(timeout=TURN_POLL_SECONDS):
                if not self._done:
                    return True
                self._turn.release()
                return False
            if self._done:
                return False

    def finish(self, raise_error: bool = True) -> None:
        """Stop; raise the OSError of an early flush that failed (`raise_error`)."""
        with self._lock:
            self._done = True
            thread = self._thread
        self._due.set()
        if thread is not None:
            thread.join()
        if raise_error and self._error is not None:
            raise self._error
