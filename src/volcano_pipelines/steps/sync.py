"""The `sync` step: stage a dataset from HDFS (or WebHDFS, a local directory, any fsspec
URL) into a mounted directory (the GlusterFS-backed PVC): incremental, parallel, atomic,
verified, with optional shard manifests. See docs/sync.md."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from volcano_pipelines.errors import ClusterError, InputError, WorkFailed
from volcano_pipelines.transfer import dest as dest_mod
from volcano_pipelines.transfer.executor import (
    CHUNK_SIZE,
    DEFAULT_TRANSFERS,
    Executor,
    Options,
    Outcome,
)
from volcano_pipelines.transfer.plan import Action, Plan, build_plan, check_glob
from volcano_pipelines.transfer.report import Progress, write_shards
from volcano_pipelines.transfer.sources import Auth, SourceMissing, open_source
from volcano_pipelines.transfer.urls import parse_dest, parse_source

log = logging.getLogger(__name__)

MAX_TRANSFERS = 256
MAX_SHARDS = 100_000
MAX_LISTED_FAILURES = 100


@dataclass
class SyncResult:
    src: str
    dst: str
    dry_run: bool
    copied: int = 0
    skipped: int = 0
    deleted: int = 0
    cleaned: int = 0  # temporary files of interrupted runs removed
    failed: int = 0
    retried: int = 0  # files that needed more than one attempt (source changed, transient error)
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

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out

    def summary(self) -> str:
        return (
            f"sync {self.src} -> {self.dst}: copied {self.copied}, skipped {self.skipped}, "
            f"deleted {self.deleted}, failed {self.failed}; {self.bytes_copied} bytes in "
            f"{self.duration_s:.2f}s ({self.throughput_mb_s:.1f} MB/s)"
        )


class SyncFailed(WorkFailed):
    """Some files could not be synced (or the destination refused): carries the result."""

    def __init__(self, message: str, result: SyncResult, exit_code: int = WorkFailed.exit_code) -> None:
        super().__init__(message)
        self.result = result
        self.exit_code = exit_code


def sync(
    src: str,
    dst: str,
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    checksum: bool = False,
    delete: bool = False,
    dry_run: bool = False,
    transfers: int = DEFAULT_TRANSFERS,
    shards: int = 0,
    user: str | None = None,
    kerberos_principal: str | None = None,
    kerberos_keytab: str | None = None,
    kerberos_ccache: str | None = None,
    hadoop_conf_dir: str | None = None,
    chunk_size: int = CHUNK_SIZE,
    full_scan: bool = False,
    progress: Progress | None = None,
) -> SyncResult:
    """Copy new and changed files from `src` into the directory `dst`.

    Raises InputError (bad arguments, missing source), ClusterError (NameNode / WebHDFS
    unreachable, destination refuses writes) or SyncFailed (some files failed, the
    destination is full) - SyncFailed.result holds the full report.

    The destination scan reuses the listing of every directory whose mtime has not
    moved since the last run (`.vpipe/scan-cache.json`); `full_scan` reads them all, which
    also catches files edited in place by something other than sync."""
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
    if not 64 << 10 <= chunk_size <= 256 << 20:
        raise InputError("chunk_size", chunk_size, "64 KiB to 256 MiB")
    if kerberos_keytab and not kerberos_principal:
        raise InputError("kerberos_keytab", kerberos_keytab, "a keytab needs --kerberos-principal too")
    if kerberos_keytab and not os.path.isfile(kerberos_keytab):
        raise InputError("kerberos_keytab", kerberos_keytab, "an existing keytab file")
    if os.path.exists(root) and not os.path.isdir(root):
        raise InputError("dst", dst, "a directory (the mounted volume), not a file")
    if location.scheme == "file" and (root == location.path or root.startswith(location.path.rstrip("/") + "/")):
        raise InputError("dst", dst, "a directory outside the source")

    progress = progress or Progress()
    started = time.monotonic()
    auth = Auth(user, kerberos_principal, kerberos_keytab, kerberos_ccache, hadoop_conf_dir)
    result = SyncResult(src=location.url, dst=root, dry_run=dry_run)

    source = open_source(location, auth)
    scanner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dest-scan")
    try:
        # Both listings are round trips (NameNode, FUSE): run them side by side.
        scanning = scanner.submit(_scan_destination, root, full_scan)
        try:
            files, refused = source.list()
        except SourceMissing as err:
            raise InputError("src", src, f"an existing file or directory ({err} does not exist)") from err
        except (PermissionError, ConnectionError, TimeoutError) as err:
            raise ClusterError(f"listing {location.url} failed: {err}") from err
        try:
            listing = scanning.result()
        except OSError as err:
            raise _dest_error(err, f"listing {root}") from err
        result.dest_dirs_read = listing.dirs_read
        result.dest_dirs_cached = len(listing.reused)
        plan = build_plan(
            files,
            listing.files,
            include=include,
            exclude=exclude,
            checksum=checksum,
            delete=delete,
            dest_temps=listing.temps,
            rejected=refused,
        )
        result.files_selected = len(plan.selected)
        result.bytes_selected = sum(e.size for e in plan.selected)
        progress.planned(_plan_line(plan, listing, len(files), time.monotonic() - started))
        if dry_run:
            _fill_dry_run(result, plan)
        else:
            _execute(result, plan, listing, source, root, progress, transfers, checksum, chunk_size, shards)
    finally:
        scanner.shutdown(wait=True)
        source.close()
        progress.finish()
    result.duration_s = round(time.monotonic() - started, 3)
    if result.duration_s > 0:
        result.throughput_mb_s = round(result.bytes_copied / 1e6 / result.duration_s, 2)
    log.info("%s", result.summary())
    if result.failed:
        raise SyncFailed(f"{result.failed} file(s) failed: {_failure_text(result)}", result)
    return result


def _plan_line(plan: Plan, listing: dest_mod.DestListing, listed: int, seconds: float) -> str:
    counts = plan.counts()
    copy = counts["copy"] + counts["compare"]
    return (
        f"listed {listed} source files and the destination ({listing.dirs_read} "
        f"directories read, {len(listing.reused)} from the scan cache) in {seconds:.2f}s; plan: copy {copy} "
        f"({plan.bytes_to_copy / 1e6:.1f} MB), skip {counts['skip']}, delete {counts['delete']}, "
        f"clean {counts['cleanup']}, reject {counts['reject']}"
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
    result.failures = [{"path": i.path, "error": f"rejected: {i.reason}"} for i in plan.of(Action.REJECT)]


def _scan_destination(root: str, full_scan: bool) -> dest_mod.DestListing:
    cache = {} if full_scan else dest_mod.load_scan_cache(root)
    return dest_mod.scan(root, cache=cache)


def _execute(
    result: SyncResult,
    plan: Plan,
    listing: dest_mod.DestListing,
    source: Any,
    root: str,
    progress: Progress,
    transfers: int,
    checksum: bool,
    chunk_size: int,
    shards: int,
) -> None:
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as err:
        raise _dest_error(err, f"creating {root}") from err
    with dest_mod.DestLock(root):
        work = plan.of(Action.COPY, Action.COMPARE)
        progress.start(len(work), sum(i.size for i in work))
        executor = Executor(
            source,
            root,
            Options(transfers=transfers, checksum=checksum, chunk_size=chunk_size),
            progress=progress.advance,
            done=progress.file_done,
        )
        try:
            outcomes = executor.run(plan)
        finally:
            # Only when a directory was read: a run served wholly from the cache has
            # nothing new to record (and writes nothing).
            if listing.dirs_read and not executor.stop.is_set():
                dest_mod.save_scan_cache(root, dest_mod.cacheable(listing))
        _tally(result, outcomes)
        if executor.fatal is not None:
            code = executor.fatal.exit_code if isinstance(executor.fatal, ClusterError) else WorkFailed.exit_code
            raise SyncFailed(str(executor.fatal), result, exit_code=code)
        if shards:
            failed = {f["path"] for f in result.failures}
            present = [e for e in plan.selected if e.path not in failed]
            try:
                result.shard_manifests = write_shards(root, present, shards)
            except OSError as err:
                raise _dest_error(err, "writing shard manifests") from err


def _tally(result: SyncResult, outcomes: list[Outcome]) -> None:
    for o in outcomes:
        if o.attempts > 1:
            result.retried += 1
        if o.result == "copied":
            result.copied += 1
            result.bytes_copied += o.bytes
        elif o.result == "skipped":
            result.skipped += 1
        elif o.result == "deleted":
            result.deleted += 1
        elif o.result == "cleaned":
            result.cleaned += 1
        else:
            result.failed += 1
            if len(result.failures) < MAX_LISTED_FAILURES:
                result.failures.append({"path": o.path, "error": o.error or "failed"})


def _dest_error(err: OSError, what: str) -> Exception:
    mapped = dest_mod.classify_os_error(err, what)
    return mapped if mapped is not err else WorkFailed(f"destination error while {what}: {err}")


def _failure_text(result: SyncResult) -> str:
    shown = "; ".join(f"{f['path']!r}: {f['error']}" for f in result.failures[:3])
    more = f" (and {result.failed - 3} more)" if result.failed > 3 else ""
    return shown + more
