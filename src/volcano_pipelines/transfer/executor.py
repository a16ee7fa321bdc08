"""Carrying out a plan: a bounded pool of transfer threads. Each file is streamed to a
temporary sibling (transfer/copy.py), its mtime set, verified, made durable as
`--durability` says (transfer/durability.py), and only then renamed over the final
name, so a final name never holds a partial file."""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum

from volcano_pipelines.transfer.copy import Abandoned, SourceChanged, copy_stream
from volcano_pipelines.transfer.digest import hash_file, hash_stream, new_digest
from volcano_pipelines.transfer.copy import DestinationError, keep_freed_memory
from volcano_pipelines.transfer.inflight import InFlight, LeftBehind, sigint_calls
from volcano_pipelines.transfer.dest import (
    DENIED_ERRNOS,
    FULL_ERRNOS,
    DestinationDenied,
    DestinationFull,
    DirMaker,
    UnsafePath,
    classify_os_error,
)
from volcano_pipelines.transfer.durability import DEFAULT_DURABILITY, Committer, syncfs_honoured
from volcano_pipelines.transfer.plan import (
    IN_THE_WAY,
    Action,
    Entry,
    Plan,
    PlanItem,
    parent_dirs,
    temp_name,
    transfer_order,
)
from volcano_pipelines.transfer.retries import is_transient, short_error
from volcano_pipelines.transfer.sources import Source
from volcano_pipelines.transfer.waiting import GaveUp, answering_signals
from volcano_pipelines.transfer.streams import StreamBudget, read_slots, split_workers

log = logging.getLogger(__name__)

CHUNK_SIZE = 8 << 20
# GlusterFS: each create/rename/setattr is a network round trip through the FUSE client
# and brick daemon; many small files in flight hide that latency (measured on this project's
# GlusterFS volumes: temp file + rename with 32 threads is ~3x faster than with 1).
DEFAULT_TRANSFERS = 32
MAX_ATTEMPTS = 8


__all__ = ["Abandoned", "DEFAULT_TRANSFERS", "Executor", "Options", "Outcome", "Result", "SourceChanged"]
# Large-file reads in flight at once: one file alone is read as this many ranges
# (rclone's --multi-thread-streams is 4 too), many are read this many at a time.
DEFAULT_STREAMS = 4
# file / batch: a large file's data is pushed to disk while it is copied (docs/sync.md).
EARLY_FLUSH = 16 << 20


class VerifyFailed(Exception):
    pass


class Result(str, Enum):
    """What happened to one planned item (a str, so reports and JSON show the word)."""

    COPIED = "copied"
    SKIPPED = "skipped"
    DELETED = "deleted"
    CLEANED = "cleaned"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # not copied: Ctrl-C


@dataclass
class Outcome:
    path: str
    result: Result
    bytes: int = 0
    error: str | None = None
    attempts: int = 1


ProgressFn = Callable[[str, int], None]  # (path, bytes just written); thread-safe callee


def _noop(path: str, n: int) -> None:
    pass


@dataclass
class Options:
    transfers: int = DEFAULT_TRANSFERS
    checksum: bool = False
    chunk_size: int = CHUNK_SIZE
    max_attempts: int = MAX_ATTEMPTS
    retry_delay: float = 0.5
    durability: str = DEFAULT_DURABILITY  # "file" | "batch" | "none" (transfer/durability.py)
    streams: int = DEFAULT_STREAMS  # large-file reads in flight across files (transfer/streams.py)
    flush_every: int = EARLY_FLUSH  # file / batch: fdatasync a large file every so many bytes


class Executor:
    def __init__(
        self,
        source: Source,
        root: str,
        options: Options,
        progress: ProgressFn = _noop,
        done: Callable[[str, str], None] | None = None,
        notify: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.done = done
        self.notify = notify  # one line for the user when Ctrl-C stops the run
        self.source = source
        self.root = root
        self.opts = options
        self._report_bytes = progress
        # Bytes reported per file in flight: a retried file's earlier bytes are taken back, so
        # progress never passes 100 % (it showed 200.7 % after one retry).
        self._sent: dict[str, int] = {}
        self._sent_lock = threading.Lock()
        self.dirs = DirMaker(root)
        self.stop = threading.Event()  # set on a destination-wide failure (full / denied)
        self.fatal: Exception | None = None
        # Ctrl-C (SIGINT): the first starts no more files and lets the ones in flight
        # finish; the second abandons those too. Either way `run` returns only after
        # every transfer thread has stopped, so the caller's destination lock is held
        # for as long as any temporary file is being written.
        self.interrupted = threading.Event()
        self.abandon = threading.Event()
        self._futures: list[Future[Outcome | Future[Outcome]]] = []
        self._renamed_dirs: set[str] = set()
        self._unchecked: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._committer: Committer | None = None
        self._flush_turn = threading.Lock()  # one early flush at a time (durability.FlushBehind)
        self._ranges: ThreadPoolExecutor | None = None
        self._streams: StreamBudget | None = None  # large-file reads in flight (transfer/streams.py)
        self._large: ThreadPoolExecutor | None = None  # the workers of large files
        self.inflight = InFlight(self.abandon, notify)  # temporary files; the give-up after a second Ctrl-C

    # ------------------------------------------------------------------ whole plan

    def run(self, plan: Plan) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for item in plan.of(Action.CLEANUP):
            outcomes.append(self._remove(item, Result.CLEANED))
        for item in plan.of(Action.REJECT):
            outcomes.append(Outcome(item.path, Result.FAILED, error=f"rejected: {item.reason}"))
        for item in plan.of(Action.SKIP):
            outcomes.append(Outcome(item.path, Result.SKIPPED))
        deletes = plan.of(Action.DELETE)
        # A destination file in the way of a source directory goes first.
        conflicts = [d for d in deletes if d.reason == IN_THE_WAY]
        for item in conflicts:
            outcomes.append(self._remove(item, Result.DELETED))
        work = plan.of(Action.COPY, Action.COMPARE)
        bad_dirs: dict[str, str] = {}
        for rel_dir in parent_dirs(item.path for item in work):
            if any(rel_dir == b or rel_dir.startswith(b + "/") for b in bad_dirs):
                continue
            try:
                self.dirs.ensure(rel_dir)
            except UnsafePath as err:
                bad_dirs[rel_dir] = str(err)
            except OSError as err:
                mapped = classify_os_error(err, f"creating directory {rel_dir}")
                if mapped is err:
                    bad_dirs[rel_dir] = f"cannot create directory: {err.strerror}"
                else:
                    self.fatal = mapped
                    self.stop.set()
                    break
        runnable: list[PlanItem] = []
        for item in work:
            blocked = next((why for d, why in bad_dirs.items() if item.path.startswith(d + "/")), None)
            if blocked:
                outcomes.append(Outcome(item.path, Result.FAILED, error=f"unsafe destination: {blocked}"))
            else:
                runnable.append(item)
        runnable = transfer_order(runnable)
        workers = max(1, min(self.opts.transfers, len(runnable) or 1))
        if self.opts.durability == "batch" and runnable:
            self._committer = Committer(syncfs_honoured(self.root), self._commit_failed, self._renamed, self._report)
        large = sum(1 for item in runnable if self._streamed(item.size))
        if large:
            keep_freed_memory()
            self._streams = StreamBudget(self.opts.streams, large)
            workers, large_workers = split_workers(workers, self.opts.streams, large, len(runnable))
            if large_workers:
                self._large = ThreadPoolExecutor(large_workers, thread_name_prefix="sync-large")
            if self.opts.streams > 1:
                # A file holding n slots reads n - 1 of its ranges here: at most streams - 1.
                self._ranges = ThreadPoolExecutor(self.opts.streams - 1, thread_name_prefix="sync-range")
        # The committer and the range readers stop inside the SIGINT guard too: until
        # they have, temporary files are still being written or renamed.
        with sigint_calls(self.interrupt):
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sync")
            try:
                done = self._map(pool, runnable)
                for _ in range(self.opts.max_attempts):
                    redo = self._recheck(runnable)
                    if not redo:
                        break
                    by_path = {item.path: item for item in redo}
                    again = self._map(pool, redo)
                    done = [o for o in done if o.path not in by_path] + [
                        Outcome(o.path, o.result, o.bytes, o.error, o.attempts + 1) for o in again
                    ]
            finally:
                wait = not self.inflight.left_behind  # not for threads stuck in a source read (inflight.py)
                for threads in (pool, self._large, self._ranges):
                    if threads is not None:
                        threads.shutdown(wait=wait, cancel_futures=not wait)
                if self._committer is not None:
                    self._committer.close()  # every handed-over file renamed or removed
                if self.inflight.left_behind:
                    self.inflight.remove_left_temps()
        outcomes.extend(done)
        if self.opts.durability != "none":
            self._sync_dirs()
        if not self.stop.is_set() and not self.interrupted.is_set():
            for item in deletes:
                if item not in conflicts:
                    outcomes.append(self._remove(item, Result.DELETED))
        return outcomes

    def _map(self, pool: ThreadPoolExecutor, items: list[PlanItem]) -> list[Outcome]:
        """Every item through the pool, in order; one not started before a Ctrl-C is
        "interrupted". Waiting here is not cut short by SIGINT (see `interrupt`)."""
        futures = [self._pool_for(item, pool).submit(self._transfer_guarded, item) for item in items]
        self._futures = futures  # one reference assignment: the handler reads it without a lock
        if self.interrupted.is_set():  # a Ctrl-C between two passes
            self._cancel_pending()
        out: list[Outcome] = []
        for item, future in zip(items, futures, strict=True):
            try:
                outcome = self.inflight.result(future)
                # batch: the file is renamed once its flush pass is done
                out.append(outcome.result() if isinstance(outcome, Future) else outcome)
            except (CancelledError, LeftBehind):
                out.append(Outcome(item.path, Result.INTERRUPTED))
        return out

    def _pool_for(self, item: PlanItem, pool: ThreadPoolExecutor) -> ThreadPoolExecutor:
        """Large files (`_streamed`) to their own workers (transfer/streams.py), the rest to `pool`."""
        return self._large if self._large is not None and self._streamed(item.size) else pool

    def _streamed(self, size: int) -> bool:
        """A large file: copy_stream reads it as a stream of ranges (over the chunk size)."""
        return size > self.opts.chunk_size

    def interrupt(self) -> None:
        """Ctrl-C. Runs in the main thread as a signal handler: flags, cancels and one
        line to the user, nothing that waits for a transfer thread."""
        if not self.interrupted.is_set():
            self.interrupted.set()
            in_flight = self._cancel_pending()
            self.notify(
                f"interrupted: stopping after the {in_flight} file(s) in flight (Ctrl-C again to abandon them)"
            )
        elif not self.abandon.is_set():
            self.inflight.abandoning()
            self.notify("interrupted again: abandoning the files in flight (their temporary files are removed)")

    def _cancel_pending(self) -> int:
        """Cancel the transfers not started yet; the number still running. No lock of
        ours: the signal handler may run while this same thread holds one."""
        return sum(1 for f in self._futures if not f.cancel() and not f.done())

    # ------------------------------------------------------------------ one file

    def _transfer_guarded(self, item: PlanItem) -> Outcome | Future[Outcome]:
        outcome = self._transfer_checked(item)
        if isinstance(outcome, Future) or outcome.result == Result.COPIED:
            with self._sent_lock:
                self._sent.pop(item.path, None)
        else:  # not copied after all: its bytes are not done
            self._take_back(item.path)
        if not isinstance(outcome, Future):  # a handed-over file is reported by the committer
            self._report(outcome)
        return outcome

    def _report(self, outcome: Outcome) -> None:
        if self.done is not None and outcome.result != Result.INTERRUPTED:
            self.done(outcome.path, outcome.result)

    def _renamed(self, parent: str) -> None:
        with self._lock:
            self._renamed_dirs.add(parent)

    def _commit_failed(self, outcome: Outcome, err: OSError) -> Outcome:
        """The committer could not flush or rename a file: the file failed; a full or
        refusing destination stops the run, as it does for a transfer."""
        mapped = classify_os_error(err, f"writing {outcome.path}")
        if mapped is not err:
            with self._lock:
                if self.fatal is None:
                    self.fatal = mapped
            self.stop.set()
        return Outcome(outcome.path, Result.FAILED, error=f"destination error: {mapped}", attempts=outcome.attempts)

    def progress(self, path: str, nbytes: int) -> None:
        with self._sent_lock:
            self._sent[path] = self._sent.get(path, 0) + nbytes
        self._report_bytes(path, nbytes)

    def _take_back(self, path: str) -> None:
        with self._sent_lock:
            sent = self._sent.pop(path, 0)
        if sent:
            self._report_bytes(path, -sent)

    def _transfer_checked(self, item: PlanItem) -> Outcome | Future[Outcome]:
        if self.stop.is_set():
            return Outcome(item.path, Result.FAILED, error=f"not attempted: {self.fatal}")
        if self.interrupted.is_set():
            return Outcome(item.path, Result.INTERRUPTED)
        try:
            return self._transfer(item)
        except Abandoned:
            return Outcome(item.path, Result.INTERRUPTED)
        except (DestinationFull, DestinationDenied) as err:
            with self._lock:
                if self.fatal is None:
                    self.fatal = err
            self.stop.set()
            return Outcome(item.path, Result.FAILED, error=str(err))
        except Exception as err:  # noqa: BLE001 - reported per file
            return Outcome(item.path, Result.FAILED, error=short_error(err))

    def _transfer(self, item: PlanItem) -> Outcome | Future[Outcome]:
        expected = Entry(item.path, item.size, item.mtime_ms)
        final = os.path.join(self.root, item.path)
        if item.action is Action.COMPARE:
            same = self._same_content(item.path, final)
            if same:
                self._set_mtime(final, expected.mtime_ms)
                return Outcome(item.path, Result.SKIPPED)
        last_error = "no attempt"
        for attempt in range(1, self.opts.max_attempts + 1):
            if self.stop.is_set():
                return Outcome(item.path, Result.FAILED, error=f"not attempted: {self.fatal}")
            if attempt > 1 and self.interrupted.is_set():
                return Outcome(item.path, Result.INTERRUPTED)
            if attempt > 1:
                self._take_back(item.path)
                # Whatever went wrong, copy what the source holds now, and check against it.
                expected = self.source.stat(item.path)
            try:
                return self._copy_once(expected, final, attempt)
            except SourceChanged as err:
                last_error = f"source changed during copy: {err}"
                log.warning("%s: %s (attempt %d/%d)", item.path, last_error, attempt, self.opts.max_attempts)
            except VerifyFailed as err:
                last_error = f"verification failed: {err}"
                log.warning("%s: %s (attempt %d/%d)", item.path, last_error, attempt, self.opts.max_attempts)
            except (OSError, RuntimeError) as err:
                if isinstance(err, DestinationError):
                    mapped = classify_os_error(err.error, f"writing {item.path}")
                    if mapped is not err.error:
                        raise mapped from err.error
                    last_error = f"destination error: {err.error}"
                    if err.error.errno not in (errno.EIO, errno.ENOTCONN, errno.ESTALE):
                        break
                elif not is_transient(err):
                    last_error = f"source error: {short_error(err)}"
                    break
                else:
                    last_error = f"transient error: {short_error(err)}"
                log.warning("%s: %s (attempt %d/%d)", item.path, last_error, attempt, self.opts.max_attempts)
                # A Ctrl-C ends the wait (the next attempt is then not made).
                self.interrupted.wait(min(8.0, self.opts.retry_delay * 2 ** (attempt - 1)))
        return Outcome(item.path, Result.FAILED, error=last_error, attempts=attempt)

    def _same_content(self, rel: str, final: str) -> bool:
        try:
            have = hash_file(final, self.opts.chunk_size)
        except OSError:
            return False
        with self.source.open(rel) as stream:
            want, _ = hash_stream(stream, self.opts.chunk_size)
        return have == want

    def _copy_once(self, expected: Entry, final: str, attempt: int) -> Outcome | Future[Outcome]:
        parent, base = os.path.split(final)
        tmp = os.path.join(parent, temp_name(base, os.urandom(8).hex()))
        digest = new_digest() if self.opts.checksum else None
        fd = -1
        handed = False  # renamed, or handed to the committer (which renames or removes it)
        try:
            if self.abandon.is_set():
                raise Abandoned()  # the run may have given up on this transfer: no new temporary file
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as err:
                raise DestinationError(err) from err
            self.inflight.started(tmp)
            # The digest needs the bytes in order: one range then.
            wanted = 1 if digest is not None else self.opts.streams
            budget = self._streams if self._streamed(expected.size) else None
            with read_slots(budget, expected.size, wanted, self.abandon) as streams, self.source.open(expected.path) as stream:
                written, reads = copy_stream(
                    stream, fd, expected.size, chunk_size=self.opts.chunk_size, streams=streams,
                    pool=self._ranges, on_bytes=lambda n: self.progress(expected.path, n), abandon=self.abandon,
                    digest=digest, flush_every=self.opts.flush_every if self.opts.durability != "none" else 0,
                    flush_turn=self._flush_turn,
                )
            try:
                mtime_ns = expected.mtime_ms * 1_000_000
                os.utime(fd, ns=(mtime_ns, mtime_ns))
                if self.opts.durability == "file":
                    os.fsync(fd)
                size = os.fstat(fd).st_size
                if self._committer is None:
                    os.close(fd)
                    fd = -1
            except OSError as err:
                raise DestinationError(err) from err
            if size != expected.size:
                raise VerifyFailed(f"wrote {size} bytes, expected {expected.size}")
            if reads > 1 or not getattr(self.source, "snapshot_reads", False):
                # Read in pieces: the file must not have changed in between.
                now = self.source.stat(expected.path)
                if now.size != expected.size or now.mtime_ms != expected.mtime_ms:
                    raise SourceChanged(f"size/mtime {expected.size}/{expected.mtime_ms} -> {now.size}/{now.mtime_ms}")
            else:
                # One read of an HDFS file is a consistent snapshot of one version; the
                # re-listing after the pass (`_recheck`) proves it was the listed version.
                with self._lock:
                    self._unchecked[expected.path] = expected
            if digest is not None:
                have = hash_file(tmp, self.opts.chunk_size)
                if have != digest.hexdigest():
                    raise VerifyFailed(f"sha256 of written file {have} != source {digest.hexdigest()}")
            outcome = Outcome(expected.path, Result.COPIED, bytes=written, attempts=attempt)
            if self._committer is not None:
                handed = True
                fd, handing = -1, fd
                return self._committer.submit(handing, tmp, final, outcome)
            try:
                os.replace(tmp, final)
                handed = True
            except OSError as err:
                raise DestinationError(err) from err
            self._renamed(parent)
            return outcome
        finally:
            if fd >= 0:
                try:
                    os.close(fd)  # may report a deferred write error; the first error wins
                except OSError:
                    pass
            self.inflight.ended(tmp)
            # After the rename there is nothing to remove (and an unlink would cost a
            # FUSE lookup per file).
            if not handed:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                except OSError as err:
                    log.warning("could not remove temporary file %s: %s", tmp, err)

    def _recheck(self, items: list[PlanItem]) -> list[PlanItem]:
        """Files copied with one read and no stat: re-list the source once and return
        those whose size or mtime moved since the copy (they are copied again)."""
        with self._lock:
            unchecked, self._unchecked = self._unchecked, {}
        if not unchecked or self.stop.is_set() or self.interrupted.is_set():
            return []
        try:
            # Off the main thread, which answers Ctrl-C meanwhile: a signal ends the wait.
            files, _ = answering_signals(self.source.list, give_up=self.interrupted)
        except GaveUp:
            return []  # a file changed during its copy keeps the old mtime: the next run copies it
        now = {e.path: e for e in files}
        redo = []
        for path, copied in sorted(unchecked.items()):
            cur = now.get(path)
            if cur is None:
                continue  # deleted at the source since: the copy is of the listed version
            if (cur.size, cur.mtime_ms) != (copied.size, copied.mtime_ms):
                log.warning("%s: source changed during copy (re-listing); copying again", path)
                redo.append(PlanItem(Action.COPY, path, "source changed during copy", cur.size, cur.mtime_ms))
        return redo

    # ------------------------------------------------------------------ misc

    def _set_mtime(self, path: str, mtime_ms: int) -> None:
        ns = mtime_ms * 1_000_000
        os.utime(path, ns=(ns, ns), follow_symlinks=False)

    def _remove(self, item: PlanItem, done: Result) -> Outcome:
        if not self.dirs.is_safe_parent(item.path):
            return Outcome(item.path, Result.FAILED, error="not removed: a parent is not a real directory")
        path = os.path.join(self.root, item.path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            return Outcome(item.path, Result.FAILED, error="not removed: is a directory")
        except OSError as err:
            if err.errno in DENIED_ERRNOS or err.errno in FULL_ERRNOS:
                return Outcome(item.path, Result.FAILED, error=f"not removed: {err.strerror}")
            raise
        if done == Result.DELETED:
            self._prune_empty_parents(item.path)
        return Outcome(item.path, done)

    def _prune_empty_parents(self, rel: str) -> None:
        parts = rel.split("/")[:-1]
        while parts:
            try:
                os.rmdir(os.path.join(self.root, *parts))
            except OSError:
                return
            parts.pop()

    def _sync_dirs(self) -> None:
        """Make the renames durable: one fsync per directory that received files."""
        for directory in sorted(self._renamed_dirs):
            try:
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as err:
                log.warning("fsync of directory %s failed: %s", directory, err)
