"""The `sync` step: stage a dataset from HDFS (or WebHDFS, a local directory, any fsspec
URL) into a mounted directory (the GlusterFS-backed PVC): incremental, parallel, atomic,
verified, with optional shard manifests. See docs/sync.md."""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from volcano_pipelines.errors import ClusterError, InputError, VpipeError, WorkFailed
from volcano_pipelines.steps.registry import WHOLE, Output
from volcano_pipelines.steps.params import check_types
from volcano_pipelines.progress import Progress
from volcano_pipelines.transfer import dest as dest_mod
from volcano_pipelines.transfer.executor import (
    DEFAULT_TRANSFERS,
    Executor,
    Options,
    Outcome,
    Result,
)
from volcano_pipelines.transfer.plan import (
    DEFAULT_MAX_DELETE,
    Action,
    DeleteLimit,
    DeleteRefusal,
    Plan,
    build_plan,
    check_deletions,
    check_glob,
    display_path,
    parse_max_delete,
    quoted_path,
    utf8_path,
)
from volcano_pipelines.transfer.progress import Progress as TransferProgress
from volcano_pipelines.transfer.shards import write_shards
from volcano_pipelines.transfer.sources import (
    Auth,
    SourceMissing,
    open_source,
    short_error,
)
from volcano_pipelines.transfer.urls import Location, parse_dest, parse_source

__all__ = [
    "DEFAULT_MAX_DELETE",
    "DEFAULT_TRANSFERS",
    "DeletionRefused",
    "SyncFailed",
    "SyncInterrupted",
    "SyncResult",
    "TransferProgress",
    "display_path",
    "quoted_path",
    "sync",
]
log = logging.getLogger(__name__)

MAX_TRANSFERS = 256
MAX_SHARDS = 100_000
MAX_CHUNK_MIB = 256
MAX_LISTED_FAILURES = 100
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


@dataclass
class SyncResult:
    # The KFP component's output parameters (steps/registry.py).
    OUTPUTS: ClassVar[tuple[Output, ...]] = (
        Output("copied", "files copied"),
        Output("bytes_copied", "bytes copied"),
        Output("failed", "files that failed (the step fails when any did)"),
        Output("result", "the whole step result (SyncResult.to_dict())", WHOLE, drop=("plan",)),
    )

    src: str
    dst: str
    dry_run: bool
    copied: int = 0
    skipped: int = 0
    deleted: int = 0
    cleaned: int = 0  # temporary files of interrupted runs removed
    failed: int = 0
    retried: int = 0  # files that needed more than one attempt (source changed, transient error)
    interrupted: int = 0  # files not copied because of Ctrl-C (not started, or abandoned)
    bytes_copied: int = 0
    files_selected: int = 0
    bytes_selected: int = 0
    dest_dirs_read: int = 0  # destination directories listed with a readdir
    dest_dirs_cached: int = 0  # ... and taken from the scan cache (mtime unchanged)
    duration_s: float = 0.0
    throughput_mb_s: float = 0.0
    failures: list[dict[str, str]] = field(default_factory=list)
    shard_manifests: list[str] = field(default_factory=list)
    plan: list[dict[str, Any]] = field(default_factory=list)  # dry run only
    error: str | None = None  # why the run stopped or failed (the error the caller sees)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.error is None

    def to_dict(self) -> dict[str, Any]:
        """For JSON: names that are not UTF-8 with those bytes as \\xNN (`utf8_path`)."""
        out = asdict(self)
        for row in out["failures"] + out["plan"]:
            row["path"] = utf8_path(row["path"])
        out["ok"] = self.ok
        return out

    def summary(self) -> str:
        stopped = f", not copied (interrupted) {self.interrupted}" if self.interrupted else ""
        return (
            f"sync {self.src} -> {self.dst}: copied {self.copied}, skipped {self.skipped}, "
            f"deleted {self.deleted}, failed {self.failed}{stopped}; {self.bytes_copied} bytes in "
            f"{self.duration_s:.2f}s ({self.throughput_mb_s:.1f} MB/s)"
        )


class SyncFailed(WorkFailed):
    """Some files could not be synced (or the destination refused): carries the result."""

    def __init__(self, message: str, result: SyncResult, exit_code: int = WorkFailed.exit_code) -> None:
        super().__init__(message)
        self.result = result
        self.exit_code = exit_code
        result.error = message


class DeletionRefused(InputError):
    """`delete` would remove more of the destination than `max_delete` allows, or the
    source selected no file at all: nothing was written or deleted. Carries the result
    (with the plan on a dry run). The message names how to allow it; `describe` words it
    for another front end (the CLI names its flags)."""

    def __init__(self, refusal: DeleteRefusal, max_delete: str, root: str, src: str, result: SyncResult) -> None:
        self.field, self.value, self.allowed = "max_delete", max_delete, "a limit this plan stays within"
        self.refusal = refusal
        self.root = display_path(root)
        self.src = display_path(src)
        self.result = result
        # Not InputError's "invalid ..." message: the limit is valid, the plan is not.
        VpipeError.__init__(self, self.describe("max_delete={!r}", "force_delete=True"))
        result.error = str(self)

    def describe(self, limit_form: str, force_form: str) -> str:
        """The message, with `limit_form` (a format for a limit value) and `force_form`
        saying how the caller allows more."""
        r = self.refusal
        if r.empty_source:
            return (
                f"refusing to delete all {r.deletes} file(s) of {self.root}: the source {self.src} selected "
                "no file (an unmounted directory, an emptied path, or filters that match nothing?); "
                f"to delete them anyway, pass {force_form}"
            )
        share = 100.0 * r.deletes / r.dest_files if r.dest_files else 100.0
        return (
            f"refusing to delete {r.deletes} of the {r.dest_files} file(s) in {self.root} ({share:.0f}%), more "
            f"than {limit_form.format(self.value)} allows; to delete them, pass "
            f"{limit_form.format(str(r.deletes))} (or 100%) or {force_form}"
        )


class SyncInterrupted(KeyboardInterrupt):
    """Ctrl-C: the run stopped early (files in flight finished or were abandoned, no
    deletes, no manifests); `.result` says what was done. A KeyboardInterrupt, so code
    that handles Ctrl-C keeps working."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, result: SyncResult) -> None:
        message = "interrupted"
        if result.interrupted:
            message += f": {result.interrupted} file(s) not copied; run the same command again to finish"
        super().__init__(message)
        self.result = result
        result.error = message


class _Forward(TransferProgress):
    """The transfer's counters, reported through the Progress every step takes (a KFP or Argo
    step pod's log lines, the quickstart); the CLI passes its own TransferProgress instead."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress

    def planned(self, summary: str) -> None:
        self.progress.note(summary)

    def changed(self) -> None:
        self.progress.files(self.files_done, self.files_total, self.bytes_done, self.bytes_total)

    def stopping(self, message: str) -> None:
        self.progress.note(message)


def sync(
    src: str,
    dst: str,
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    checksum: bool = False,
    delete: bool = False,
    max_delete: str = DEFAULT_MAX_DELETE,
    force_delete: bool = False,
    dry_run: bool = False,
    transfers: int = DEFAULT_TRANSFERS,
    shards: int = 0,
    user: str | None = None,
    kerberos_principal: str | None = None,
    kerberos_keytab: str | None = None,
    kerberos_ccache: str | None = None,
    hadoop_conf_dir: str | None = None,
    chunk_mib: int = 8,
    full_scan: bool = False,
    progress: Progress | TransferProgress | None = None,
) -> SyncResult:
    """Copy new and changed files from `src` into the directory `dst`.

    Raises InputError (bad arguments, missing source; DeletionRefused when `delete` would
    remove more than `max_delete` - "N" files or "P%" of the destination's - or the source
    selected nothing, unless `force_delete`), ClusterError (NameNode / WebHDFS
    unreachable, destination refuses writes), SyncFailed (some files failed, the
    destination is full) or SyncInterrupted (Ctrl-C; a KeyboardInterrupt). SyncFailed,
    DeletionRefused and SyncInterrupted carry the report in `.result`.

    The destination scan reuses the listing of every directory whose mtime has not
    moved since the last run (`.vpipe/scan-cache.json`); `full_scan` reads them all, which
    also catches files edited in place by something other than sync.

    Args:
        src: hdfs://nn:8020/path, hdfs://nameservice/path, viewfs://..., webhdfs://host:9870/path, file:///path
        dst: destination directory (the mounted volume)
        include: only files matching (repeatable); '**' crosses directories
        exclude: skip files matching (repeatable)
        checksum: compare and verify by content hash, not size + mtime
        delete: remove destination files that are not in the source
        max_delete: with --delete, refuse (exit 2, nothing changed) a plan that deletes more than N files or P% of
            the destination's files; a source that selects no file never deletes without --force-delete
        force_delete: with --delete, delete whatever the plan says, even everything (no --max-delete, no
            empty-source check)
        dry_run: print the plan, change nothing
        transfers: parallel file transfers
        shards: write N manifests balanced by bytes under DST/.vpipe/shards/
        user: simple-auth user (default: $HADOOP_USER_NAME or the login user)
        kerberos_principal: Kerberos principal (with --kerberos-keytab, or a ticket cache)
        kerberos_keytab: keytab file for --kerberos-principal
        kerberos_ccache: Kerberos ticket cache (default: KRB5CCNAME)
        hadoop_conf_dir: directory with core-site.xml / hdfs-site.xml (default: $HADOOP_CONF_DIR)
        chunk_mib: streaming chunk size in MiB, 1 to 256
        full_scan: read every destination directory instead of reusing the listings of unchanged ones
            (DST/.vpipe/scan-cache.json); also finds files edited in place by other writers
    """
    check_types(sync, locals())
    location = parse_source(src)
    root = parse_dest(dst)
    for name, globs in (("include", include), ("exclude", exclude)):
        for pattern in globs:
            bad = check_glob(pattern)
            if bad:
                raise InputError(name, pattern, bad)
    if not 1 <= transfers <= MAX_TRANSFERS:
        raise InputError("transfers", transfers, f"an integer from 1 to {MAX_TRANSFERS}")
    if not 0 <= shards <= MAX_SHARDS:
        raise InputError("shards", shards, f"0 (no manifests) or a count up to {MAX_SHARDS}")
    if not 1 <= chunk_mib <= MAX_CHUNK_MIB:
        raise InputError("chunk_mib", chunk_mib, f"a chunk size in MiB from 1 to {MAX_CHUNK_MIB}")
    limit = parse_max_delete(max_delete)
    if limit is None:
        raise InputError("max_delete", max_delete, "a number of files N, or a share of the destination's files P% (0% to 100%)")
    if kerberos_keytab and not kerberos_principal:
        raise InputError("kerberos_keytab", kerberos_keytab, "a keytab needs --kerberos-principal too")
    if kerberos_keytab and not os.path.isfile(kerberos_keytab):
        raise InputError("kerberos_keytab", kerberos_keytab, "an existing keytab file")
    if os.path.exists(root) and not os.path.isdir(root):
        raise InputError("dst", dst, "a directory (the mounted volume), not a file")
    if location.scheme == "file":
        shown = display_path(location.path)
        if _contains(location.path, root):
            raise InputError("dst", dst, f"a directory outside the source {shown} (compared resolved, symlinks followed)")
        if _contains(root, location.path):
            raise InputError("dst", dst, f"a directory that does not contain the source {shown} (compared resolved, symlinks followed)")

    progress = progress if isinstance(progress, TransferProgress) else _Forward(progress or Progress())
    started = time.monotonic()
    auth = Auth(user, kerberos_principal, kerberos_keytab, kerberos_ccache, hadoop_conf_dir)
    result = SyncResult(src=location.url, dst=root, dry_run=dry_run)
    options = Options(transfers=transfers, checksum=checksum, chunk_size=chunk_mib << 20)
    try:
        try:
            interrupted = _run(result, src, location, root, auth, progress, options, started, include=include,
                               exclude=exclude, delete=delete, limit=limit, max_delete=max_delete,
                               force_delete=force_delete, dry_run=dry_run, shards=shards, full_scan=full_scan)
        finally:
            _finish(result, started)
    except SyncInterrupted:
        raise
    except KeyboardInterrupt as err:
        raise SyncInterrupted(result) from err
    if interrupted:
        raise SyncInterrupted(result)
    log.info("%s", result.summary())
    if result.failed:
        raise SyncFailed(f"{result.failed} file(s) failed: {_failure_text(result)}", result)
    return result


def _run(
    result: SyncResult,
    src: str,
    location: Location,
    root: str,
    auth: Auth,
    progress: TransferProgress,
    options: Options,
    started: float,
    *,
    include: Sequence[str],
    exclude: Sequence[str],
    delete: bool,
    limit: DeleteLimit,
    max_delete: str,
    force_delete: bool,
    dry_run: bool,
    shards: int,
    full_scan: bool,
) -> bool:
    """List, plan and carry out (or describe) the plan. True when Ctrl-C stopped it."""
    source = open_source(location, auth)
    scanner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dest-scan")
    try:
        # Both listings are round trips (NameNode, FUSE): run them side by side.
        scanning = scanner.submit(_scan_destination, root, full_scan)
        try:
            files, refused = source.list()
        except SourceMissing as err:
            raise InputError("src", src, f"an existing file or directory ({err} does not exist)") from err
        except (OSError, RuntimeError) as err:  # refused, unreachable, or the remote's own error (hdfs-native)
            raise ClusterError(f"listing {location.url} failed: {short_error(err)}") from err
        try:
            listing = scanning.result()
        except OSError as err:
            raise _dest_error(err, f"listing {root}") from err
        # After the scan: a sync that held the lock during it may have had temporary files
        # in flight; one that let go since has renamed or removed them (a killed one
        # leaves them, and those are leftovers).
        busy = bool(listing.temps) and dest_mod.lock_held(root)
        if busy and not dry_run:
            raise dest_mod.another_sync(root)
        result.dest_dirs_read = listing.dirs_read
        result.dest_dirs_cached = len(listing.reused)
        plan = build_plan(
            files,
            listing.files,
            include=include,
            exclude=exclude,
            checksum=options.checksum,
            delete=delete,
            dest_temps=() if busy else listing.temps,
            rejected=refused,
        )
        result.files_selected = len(plan.selected)
        result.bytes_selected = sum(e.size for e in plan.selected)
        in_use = len(listing.temps) if busy else 0
        progress.planned(_plan_line(plan, listing, len(files) + len(refused), in_use, time.monotonic() - started))
        refusal = None if force_delete else check_deletions(plan, len(listing.files), limit)
        if dry_run:
            _fill_dry_run(result, plan)
        if refusal is not None:
            raise DeletionRefused(refusal, max_delete, root, location.url, result)
        if dry_run:
            return False
        return _execute(result, plan, listing, source, root, progress, options, shards)
    finally:
        scanner.shutdown(wait=True)
        source.close()
        progress.finish()


def _finish(result: SyncResult, started: float) -> None:
    result.duration_s = round(time.monotonic() - started, 3)
    if result.duration_s > 0:
        result.throughput_mb_s = round(result.bytes_copied / 1e6 / result.duration_s, 2)


def _contains(outer: str, inner: str) -> bool:
    """True when `inner` is `outer` or lies below it, however it is spelled: the resolved
    paths (symlinks followed) are compared, and so are the device and inode of `outer`
    with those of every existing directory above `inner` (a bind mount, or a symlink
    created between the two checks)."""
    real_outer, real_inner = os.path.realpath(outer), os.path.realpath(inner)
    if real_inner == real_outer or real_inner.startswith(real_outer.rstrip("/") + "/"):
        return True
    try:
        st = os.stat(outer)
    except OSError:
        return False  # does not exist (yet): nothing can lie below it
    if not stat.S_ISDIR(st.st_mode):
        return False
    path = real_inner
    while True:
        try:
            here = os.stat(path)
            if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino):
                return True
        except OSError:
            pass  # not created yet
        parent = os.path.dirname(path)
        if parent == path:
            return False
        path = parent


def _plan_line(plan: Plan, listing: dest_mod.DestListing, listed: int, in_use: int, seconds: float) -> str:
    """What was listed and what the plan does. The source side adds up: every listed
    entry is copied, skipped, rejected or excluded by the filters."""
    counts = plan.counts()
    copy = counts["copy"] + counts["compare"]
    excluded = f", exclude {plan.excluded}" if plan.excluded else ""
    busy = (
        f"; another sync is running here (it holds the destination lock): its {in_use} temporary file(s) are not leftovers"
        if in_use
        else ""
    )
    return (
        f"listed {listed} source files and the destination ({listing.dirs_read} "
        f"directories read, {len(listing.reused)} from the scan cache) in {seconds:.2f}s; plan: copy {copy} "
        f"({plan.bytes_to_copy / 1e6:.1f} MB), skip {counts['skip']}, delete {counts['delete']}, "
        f"clean {counts['cleanup']}, reject {counts['reject']}{excluded}{busy}"
    )


def _fill_dry_run(result: SyncResult, plan: Plan) -> None:
    result.plan = [
        {"action": item.action.value, "path": item.path, "reason": item.reason, "size": item.size}
        for item in plan.items
    ]
    counts = plan.counts()
    # What a real run would do (COMPARE may turn out to be a skip).
    result.copied = counts["copy"] + counts["compare"]
    result.skipped = counts["skip"]
    result.deleted = counts["delete"]
    result.cleaned = counts["cleanup"]
    result.failed = counts["reject"]
    result.failures = [
        {"path": i.path, "error": f"rejected: {i.reason}"} for i in plan.of(Action.REJECT)
    ][:MAX_LISTED_FAILURES]


def _scan_destination(root: str, full_scan: bool) -> dest_mod.DestListing:
    cache = {} if full_scan else dest_mod.load_scan_cache(root)
    return dest_mod.scan(root, cache=cache)


def _execute(
    result: SyncResult,
    plan: Plan,
    listing: dest_mod.DestListing,
    source: Any,
    root: str,
    progress: TransferProgress,
    options: Options,
    shards: int,
) -> bool:
    """Carry out the plan under the destination lock. True when Ctrl-C stopped it."""
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as err:
        raise _dest_error(err, f"creating {root}") from err
    with dest_mod.DestLock(root):
        work = plan.of(Action.COPY, Action.COMPARE)
        progress.start(len(work), sum(i.size for i in work))
        executor = Executor(source, root, options, progress=progress.advance, done=progress.file_done,
                            notify=progress.stopping)
        try:
            outcomes = executor.run(plan)
        finally:
            # Only when a directory was read: a run served wholly from the cache has
            # nothing new to record (and writes nothing).
            if listing.dirs_read and not executor.stop.is_set() and not executor.interrupted.is_set():
                dest_mod.save_scan_cache(root, dest_mod.cacheable(listing))
        _tally(result, outcomes)
        if executor.fatal is not None:
            code = executor.fatal.exit_code if isinstance(executor.fatal, ClusterError) else WorkFailed.exit_code
            raise SyncFailed(str(executor.fatal), result, exit_code=code)
        if executor.interrupted.is_set():
            return True
        if shards:
            failed = {o.path for o in outcomes if o.result == Result.FAILED}  # all, not the first 100 listed
            present = [e for e in plan.selected if e.path not in failed]
            try:
                result.shard_manifests = write_shards(root, present, shards)
            except OSError as err:
                # The files are synced: the error carries the report of that.
                mapped = _dest_error(err, "writing shard manifests")
                raise SyncFailed(str(mapped), result, exit_code=mapped.exit_code) from err
    return False


def _tally(result: SyncResult, outcomes: list[Outcome]) -> None:
    for o in outcomes:
        if o.attempts > 1:
            result.retried += 1
        if o.result == Result.COPIED:
            result.copied += 1
            result.bytes_copied += o.bytes
        elif o.result == Result.SKIPPED:
            result.skipped += 1
        elif o.result == Result.DELETED:
            result.deleted += 1
        elif o.result == Result.CLEANED:
            result.cleaned += 1
        elif o.result == Result.INTERRUPTED:
            result.interrupted += 1
        else:
            result.failed += 1
            if len(result.failures) < MAX_LISTED_FAILURES:
                result.failures.append({"path": o.path, "error": o.error or "failed"})


def _dest_error(err: OSError, what: str) -> VpipeError:
    mapped = dest_mod.classify_os_error(err, what)
    return mapped if isinstance(mapped, VpipeError) else WorkFailed(f"destination error while {what}: {err}")


def _failure_text(result: SyncResult) -> str:
    shown = "; ".join(f"{quoted_path(f['path'])}: {f['error']}" for f in result.failures[:3])
    more = f" (and {result.failed - 3} more)" if result.failed > 3 else ""
    return shown + more
