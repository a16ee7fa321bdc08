"""The sync engine: one `run(request, listener)` lists both sides, plans, and carries the
plan out (or describes it, on a dry run) under the destination lock, then reports. The
step (`steps/_sync.py`) only checks its arguments and builds the request."""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from volcano_pipelines.errors import ClusterError, InputError, VpipeError, WorkFailed
from volcano_pipelines.transfer import dest as dest_mod
from volcano_pipelines.transfer.executor import Executor, Options, Outcome, Result
from volcano_pipelines.transfer.plan import (
    DEFAULT_MAX_DELETE,
    RESERVED_DIR,
    Action,
    DeleteLimit,
    Plan,
    build_plan,
    check_deletions,
    parse_max_delete,
    quoted_path,
    selected,
)
from volcano_pipelines.transfer.progress import Progress
from volcano_pipelines.transfer.result import MAX_LISTED_FAILURES, DeletionRefused, SyncFailed, SyncInterrupted, SyncResult, tally
from volcano_pipelines.transfer.shards import write_shards
from volcano_pipelines.transfer.retries import short_error
from volcano_pipelines.transfer.sources import Auth, SourceMissing, open_source
from volcano_pipelines.transfer.waiting import answering_signals
from volcano_pipelines.transfer.urls import Location

if TYPE_CHECKING:  # the copy pods' modules load only for a sync with --workers above 1
    from volcano_pipelines.transfer import fanout


__all__ = ["MAX_LISTED_FAILURES", "SyncRequest", "run"]
log = logging.getLogger(__name__)



@dataclass(frozen=True)
class SyncRequest:
    """A checked sync: what to copy where, and how. `src` is the source as the caller
    typed it (error messages quote it); `location` is it parsed."""

    src: str
    location: Location
    root: str
    auth: Auth = field(default_factory=Auth)
    options: Options = field(default_factory=Options)
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    delete: bool = False
    limit: DeleteLimit = field(default_factory=lambda: parse_max_delete(DEFAULT_MAX_DELETE) or DeleteLimit())
    max_delete: str = DEFAULT_MAX_DELETE  # as given: the refusal message quotes it
    force_delete: bool = False
    dry_run: bool = False
    shards: int = 0
    full_scan: bool = False
    # --workers N > 1: the copy runs in N pods (transfer/fanout.py), started by `launcher`; the
    # run's files live under .vpipe/runs/<run_id>/ and the copy job is named `job_name`.
    workers: int = 1
    run_id: str = ""
    job_name: str = ""
    launcher: fanout.Launcher | None = None


def run(request: SyncRequest, listener: Progress) -> SyncResult:
    """Carry out `request`, reporting to `listener`. Returns the result, or raises
    InputError (missing source; DeletionRefused), ClusterError (source unreachable,
    destination refuses writes), SyncFailed (some files failed, destination full) or
    SyncInterrupted (Ctrl-C); the last three and DeletionRefused carry the result."""
    started = time.monotonic()
    result = SyncResult(src=request.location.url, dst=request.root, dry_run=request.dry_run)
    try:
        try:
            interrupted = _run(request, result, listener, started)
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


def _run(request: SyncRequest, result: SyncResult, progress: Progress, started: float) -> bool:
    """List, plan and carry out (or describe) the plan. True when Ctrl-C stopped it."""
    location, root = request.location, request.root
    if _fanned_out(request) and not request.dry_run:
        from volcano_pipelines.transfer import fanout, partition

        record = partition.load_run(root, request.run_id) if os.path.isdir(root) else None
        if record is not None:  # planned by an earlier attempt of this step: attach, do not plan again
            if record.src != request.src:
                # Another run's id (a copied pipeline parameter): resuming would finish that run's
                # plan, and its pods may still write here. Nothing is touched.
                raise InputError("run_id", request.run_id,
                                 f"a run id of its own: it names an unfinished run from {record.src} into this "
                                 f"destination (resume that run with its source, or give this one another run id)")
            try:
                with dest_mod.DestLock(root):
                    fanout.resume(request, result, record, progress)
            finally:
                progress.finish()
            return False
    source = open_source(location, request.auth)
    result.read_path = source.read_path
    scanner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dest-scan")
    try:
        # Both listings are round trips (NameNode, FUSE): run them side by side.
        scanning = scanner.submit(_scan_destination, root, request.full_scan)
        try:
            files, refused = answering_signals(source.list)
        except SourceMissing as err:
            raise InputError("src", request.src, f"an existing file or directory ({err} does not exist)") from err
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
        if busy and not request.dry_run:
            raise dest_mod.another_sync(root)
        result.dest_dirs_read = listing.dirs_read
        result.dest_dirs_cached = len(listing.reused)
        plan = build_plan(
            files,
            listing.files,
            include=request.include,
            exclude=request.exclude,
            checksum=request.options.checksum,
            delete=request.delete,
            dest_temps=() if busy else listing.temps,
            rejected=refused,
        )
        _check_selection(request, [e.path for e in files] + [path for path, _ in refused], plan)
        result.files_selected = len(plan.selected)
        result.bytes_selected = sum(e.size for e in plan.selected)
        in_use = len(listing.temps) if busy else 0
        progress.planned(_plan_line(plan, listing, len(files) + len(refused), in_use, time.monotonic() - started))
        refusal = None if request.force_delete else check_deletions(plan, len(listing.files), request.limit)
        if request.dry_run:
            _fill_dry_run(result, plan)
        if refusal is not None:
            raise DeletionRefused(refusal, request.max_delete, root, location.url, result)
        if request.dry_run:
            _check_writable(root)  # the real run's first write would fail: say so, as it would
            return False
        return _execute(request, result, plan, listing, source, progress)
    finally:
        scanner.shutdown(wait=True)
        source.close()
        progress.finish()


def _check_selection(request: SyncRequest, listed: list[str], plan: Plan) -> None:
    """Before anything is copied: includes that select no listed file are a typo, not an empty
    dataset (exit 2; one of several that matches nothing is a warning); more shards than files
    selected would leave workers with empty shards."""
    unmatched = unmatched_includes(listed, request.include) if request.include and listed else []
    if unmatched and len(unmatched) == len(set(request.include)):
        value: str | list[str] = request.include[0] if len(request.include) == 1 else list(request.include)
        raise InputError("include", value, f"globs that select at least one of the {len(listed)} source files "
                         "listed (none does; without '/' a glob matches base names, with '/' the path below SRC)")
    for pattern in unmatched:
        log.warning("include glob %r selects none of the %d source files listed", pattern, len(listed))
    if request.shards > len(plan.selected):
        raise InputError("shards", request.shards, f"0 (no manifests) or at most the number of files selected "
                         f"({len(plan.selected)}): every shard gets at least one file")


def unmatched_includes(paths: Sequence[str], include: Sequence[str]) -> list[str]:
    """The include globs that match none of `paths` (a typo selects nothing, silently)."""
    left = list(dict.fromkeys(include))
    for path in paths:
        left = [p for p in left if not selected(path, (p,), ())]
        if not left:
            break
    return left


def _finish(result: SyncResult, started: float) -> None:
    result.duration_s = round(time.monotonic() - started, 3)
    if result.duration_s > 0:
        result.throughput_mb_s = round(result.bytes_copied / 1e6 / result.duration_s, 2)


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


def _check_writable(root: str) -> None:
    """A dry run's look at what the real run would meet first, without writing: DestinationDenied,
    in the real run's words, when `root` (or, where it does not exist yet, the directory it would
    be created in) refuses writes. access(2) answers for the caller's ids and says EROFS on a
    read-only mount, root included, as the real run's first write would."""
    path = root
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    if os.access(path, os.W_OK | os.X_OK):
        return
    code = errno.EROFS if os.statvfs(path).f_flag & os.ST_RDONLY else errno.EACCES
    what = f"preparing {os.path.join(root, RESERVED_DIR)}" if path == root else f"creating {root}"
    raise dest_mod.DestinationDenied(f"destination not writable while {what}: {os.strerror(code)}")


def _execute(
    request: SyncRequest,
    result: SyncResult,
    plan: Plan,
    listing: dest_mod.DestListing,
    source: Any,
    progress: Progress,
) -> bool:
    """Carry out the plan under the destination lock. True when Ctrl-C stopped it."""
    root = request.root
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as err:
        raise _dest_error(err, f"creating {root}") from err
    with dest_mod.DestLock(root):
        if _fanned_out(request):
            from volcano_pipelines.transfer import fanout

            fanout.execute(request, result, plan, source, progress)
            return False
        work = plan.of(Action.COPY, Action.COMPARE)
        progress.start(len(work), sum(i.size for i in work))
        executor = Executor(source, root, request.options, progress=progress.advance, done=progress.file_done,
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
        if request.shards:
            failed = {o.path for o in outcomes if o.result == Result.FAILED}  # all, not the first 100 listed
            present = [e for e in plan.selected if e.path not in failed]
            try:
                result.shard_manifests = write_shards(root, present, request.shards)
            except OSError as err:
                # The files are synced: the error carries the report of that.
                mapped = _dest_error(err, "writing shard manifests")
                raise SyncFailed(str(mapped), result, exit_code=mapped.exit_code) from err
    return False


def _fanned_out(request: SyncRequest) -> bool:
    return request.workers > 1 and request.launcher is not None


def _tally(result: SyncResult, outcomes: list[Outcome]) -> None:
    result.add(tally(outcomes))


def _dest_error(err: OSError, what: str) -> VpipeError:
    mapped = dest_mod.classify_os_error(err, what)
    return mapped if isinstance(mapped, VpipeError) else WorkFailed(f"destination error while {what}: {err}")


def _failure_text(result: SyncResult) -> str:
    shown = "; ".join(f"{quoted_path(f['path'])}: {f['error']}" for f in result.failures[:3])
    more = f" (and {result.failed - 3} more)" if result.failed > 3 else ""
    return shown + more
