"""The coordinator of a sync over several pods (`--workers N`, docs/sync.md). The engine
(transfer/engine.py) lists and plans once, as for one process, and hands the plan here with the
destination lock held: the cleanups, rejections and in-the-way deletions are done here, the
files to copy are split into partitions written under `.vpipe/runs/<run-id>/`
(transfer/partition.py), a `Launcher` runs the copy pods (transfer/part.py) to their end, and
the run finishes here once: every pod's result summed, leftover temporary files removed, the
`--delete` deletions (under the bound the engine already checked for the whole run), the shard
manifests, the report. A run that does not finish keeps its directory: the same step run
again with the same run id finds it and attaches (`resume`) instead of planning again.

The launcher is given, not imported: the step passes one that runs a Volcano Job
(steps/_sync_workers.py), tests may run the partitions in threads."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import replace
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO

from volcano_pipelines.errors import ClusterError, VpipeError, WorkFailed
from volcano_pipelines.transfer import dest as dest_mod
from volcano_pipelines.transfer import partition
from volcano_pipelines.transfer.executor import Executor, Result
from volcano_pipelines.transfer.plan import IN_THE_WAY, Action, Plan, PlanItem, parent_dirs
from volcano_pipelines.transfer.progress import Progress
from volcano_pipelines.transfer.result import MAX_LISTED_FAILURES, SyncFailed, SyncResult, Tally, tally
from volcano_pipelines.transfer.shards import write_shards
from volcano_pipelines.transfer.plan import Entry
from volcano_pipelines.transfer.sources import Source

if TYPE_CHECKING:
    from volcano_pipelines.transfer.engine import SyncRequest

__all__ = ["Launcher", "execute", "resume"]
log = logging.getLogger(__name__)

# Runs the copy job of `record` (whose files are under the destination root) to its end: creates
# it, or attaches to the one this run already started. Returns None when every pod succeeded,
# else why not; raises VpipeError when it could not run or wait for it.
Launcher = Callable[[partition.RunRecord], "str | None"]
POLL_SECONDS = 2.0


def execute(request: SyncRequest, result: SyncResult, plan: Plan, source: Source, progress: Progress) -> None:
    """Carry out `plan` over `request.workers` pods (the engine holds the destination lock)."""
    root = request.root
    before = [i for i in plan.items if i.action in (Action.CLEANUP, Action.REJECT, Action.SKIP)
              or (i.action is Action.DELETE and i.reason == IN_THE_WAY)]
    executor = Executor(source, root, request.options)
    counted = tally(executor.run(Plan(items=tuple(before), selected=())))
    del counted.failures[MAX_LISTED_FAILURES:]
    if executor.fatal is not None:
        result.add(counted)
        raise SyncFailed(str(executor.fatal), result, exit_code=_exit_code(executor.fatal))
    work = plan.of(Action.COPY, Action.COMPARE)
    _make_dirs(root, work)
    parts = partition.split(work, request.workers) if work else []
    record = partition.RunRecord(
        run_id=request.run_id, src=request.src, user=request.auth.user, options=vars(request.options).copy(),
        kerberos_principal=request.auth.kerberos_principal, kerberos_keytab=request.auth.kerberos_keytab,
        kerberos_ccache=request.auth.kerberos_ccache,
        hadoop_conf_dir=request.auth.hadoop_conf_dir or os.environ.get("HADOOP_CONF_DIR"),
        parts=len(parts), job=request.job_name,
        files_selected=result.files_selected, bytes_selected=result.bytes_selected,
        selected=[[e.path, e.size, e.mtime_ms] for e in plan.selected],
        deletes=[[i.path, i.reason] for i in plan.of(Action.DELETE) if i.reason != IN_THE_WAY],
        before={"skipped": counted.skipped, "cleaned": counted.cleaned, "failed": counted.failed,
                "deleted": counted.deleted, "retried": counted.retried},
        failures_before=counted.failures,
    )
    if parts:
        sizes = ", ".join(f"{n} files / {b / 1e6:.1f} MB" for n, b in partition.part_sizes(parts))
        progress.planned(f"copying over {len(parts)} pods (job {record.job}, run {record.run_id}): {sizes}")
    try:
        partition.save_run(root, record, parts)
    except OSError as err:
        raise _failed(result, err, "writing the run's partitions") from err
    _finish(request, result, record, progress)


def resume(request: SyncRequest, result: SyncResult, record: partition.RunRecord, progress: Progress) -> None:
    """Finish a run an earlier attempt of the step planned: attach to its copy job (or run it
    again: the pods skip what is already in place), then finish as `execute` does."""
    progress.planned(f"resuming run {record.run_id}: {record.parts} partition(s) planned before, job {record.job}")
    result.files_selected, result.bytes_selected = record.files_selected, record.bytes_selected
    _finish(request, result, record, progress)


def _finish(request: SyncRequest, result: SyncResult, record: partition.RunRecord, progress: Progress) -> None:
    root = request.root
    result.add(Tally(**record.before, failures=list(record.failures_before)))
    failed_paths: set[str] = set()
    if record.parts:
        try:
            why = _run_job(request, record, progress)
        except VpipeError as err:
            # Stopped while the job may still run (cancelled, this step's pod lost, the cluster gone):
            # its pods may be writing, so nothing is cleaned up; the same step run again attaches.
            raise SyncFailed(f"{err} (the run's plan is kept: the same step with run id {record.run_id} resumes it)",
                             result, exit_code=err.exit_code) from err
        results = [partition.load_result(root, record.run_id, k) for k in range(record.parts)]
        for part in results:
            if part is not None:
                _merge_part(result, part, failed_paths)
        result.workers = [_worker_line(k, part) for k, part in enumerate(results)]
        missing = [k for k, part in enumerate(results) if part is None]
        stopped = [f"partition {part.part} ({part.pod or 'pod'}): {part.fatal}" for part in results
                   if part is not None and part.fatal]
        if why is None and (missing or stopped):
            why = "; ".join(stopped + ([f"partition(s) {', '.join(map(str, missing))} left no result"]
                                       if missing else []))
        # The job has ended: a temporary file is a leftover of a pod that was killed.
        result.cleaned += _remove_leftovers(root)
        if why is not None:
            raise SyncFailed(f"the copy job {record.job} did not finish: {why} (the run's plan is kept: the same step "
                             f"with run id {record.run_id} resumes it)", result)
    executor = Executor(_NoSource(), root, request.options)
    deletes = [PlanItem(Action.DELETE, path, reason) for path, reason in record.deletes]
    outcomes = executor.run(Plan(items=tuple(deletes), selected=()))
    for o in outcomes:
        if o.result == Result.DELETED:
            result.deleted += 1
        else:
            result.failed += 1
            result.failures.append({"path": o.path, "error": o.error or "not deleted"})
    if request.shards:
        present = [e for e in record.selected_entries() if e.path not in failed_paths]
        try:
            result.shard_manifests = write_shards(root, present, request.shards)
        except OSError as err:
            raise _failed(result, err, "writing shard manifests") from err
    partition.remove_run(root, record.run_id)
    del result.failures[MAX_LISTED_FAILURES:]


def _run_job(request: SyncRequest, record: partition.RunRecord, progress: Progress) -> str | None:
    """The launcher, with the pods' counters summed into `progress` while it waits."""
    total_files = total_bytes = 0
    for k in range(record.parts):
        items = partition.load_part(request.root, record.run_id, k)
        total_files += len(items)
        total_bytes += sum(i.size for i in items)
    progress.start(total_files, total_bytes)
    stop = threading.Event()
    poller = threading.Thread(target=_poll, args=(request.root, record, progress, stop), name="sync-pods",
                              daemon=True)
    poller.start()
    assert request.launcher is not None
    try:
        return request.launcher(record)
    finally:
        stop.set()
        poller.join()
        _sum_progress(request.root, record, progress)


def _poll(root: str, record: partition.RunRecord, progress: Progress, stop: threading.Event) -> None:
    while not stop.wait(POLL_SECONDS):
        _sum_progress(root, record, progress)


def _sum_progress(root: str, record: partition.RunRecord, progress: Progress) -> None:
    files = nbytes = 0
    for k in range(record.parts):
        now = partition.load_progress(root, record.run_id, k)
        if now is not None:
            files += now.files_done
            nbytes += now.bytes_done
    with progress.lock:
        progress.files_done, progress.bytes_done = files, nbytes
    progress.changed()


def _merge_part(result: SyncResult, part: partition.PartResult, failed_paths: set[str]) -> None:
    failed_paths.update(failure["path"] for failure in part.failures)
    result.add(replace(part, failures=[{**failure, "pod": part.pod} for failure in part.failures]))
    result.copied += part.copied_before  # an earlier attempt's copies are the run's too
    result.bytes_copied += part.bytes_before
    result.read_path = part.read_path or result.read_path  # the pods' (their image's hdfs-native), not the step's


def _worker_line(index: int, part: partition.PartResult | None) -> dict[str, Any]:
    if part is None:
        return {"part": index, "pod": None, "finished": False}
    return {"part": index, "pod": part.pod, "finished": part.fatal is None, "copied": part.copied,
            "copied_before": part.copied_before, "skipped": part.skipped, "failed": part.failed, "bytes_copied": part.bytes_copied,
            "duration_s": part.duration_s, "throughput_mb_s": part.throughput_mb_s, "read_path": part.read_path,
            "error": part.fatal}


def _make_dirs(root: str, work: list[PlanItem]) -> None:
    """The parent directories, made once here (the pods would race to make the same ones). A
    directory that cannot be made is left to the pods, which fail its files one by one, as one
    process does."""
    dirs = dest_mod.DirMaker(root)
    for rel_dir in parent_dirs(item.path for item in work):
        try:
            dirs.ensure(rel_dir)
        except (dest_mod.UnsafePath, OSError):
            continue


def _remove_leftovers(root: str) -> int:
    removed = 0
    try:
        temps = dest_mod.scan(root).temps
    except OSError as err:
        log.warning("could not look for leftover temporary files in %s: %s (the next run removes them)", root, err)
        return 0
    for rel in temps:
        try:
            os.unlink(os.path.join(root, rel))
            removed += 1
        except FileNotFoundError:
            pass
        except OSError as err:
            log.warning("could not remove the leftover %s: %s", rel, err)
    return removed


class _NoSource:
    """The deletions read nothing from the source."""

    description = "no source (deletions only)"
    read_path = "none"

    def list(self) -> tuple[list[Entry], list[tuple[str, str]]]:
        raise AssertionError("not listed")

    def stat(self, rel: str) -> Entry:
        raise AssertionError("not read")

    def open(self, rel: str) -> BinaryIO:
        raise AssertionError("not read")

    def close(self) -> None:
        pass


def _exit_code(err: Exception) -> int:
    return err.exit_code if isinstance(err, ClusterError) else WorkFailed.exit_code


def _failed(result: SyncResult, err: OSError, what: str) -> SyncFailed:
    mapped = dest_mod.classify_os_error(err, what)
    message = str(mapped) if isinstance(mapped, VpipeError) else f"destination error while {what}: {err}"
    return SyncFailed(message, result, exit_code=_exit_code(mapped))
