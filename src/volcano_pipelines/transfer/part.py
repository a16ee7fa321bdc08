"""One copy pod's work in a sync over several pods (transfer/partition.py): copy the files of
one partition with the same executor a one-process sync uses (temporary file, verify, the
durability mode, rename), write the pod's counters as it goes and its result at the end.
It takes no destination lock: the coordinator holds it for the whole run.

A pod that runs again (Volcano restarted the job after a pod was evicted or failed) finds
the files of its partition that an earlier attempt finished in place (same size and mtime)
and does not copy them again; the temporary files a killed attempt left are removed by the
coordinator once the job has ended."""

from __future__ import annotations

import logging
import os
import threading
import time

from volcano_pipelines.errors import WorkFailed
from volcano_pipelines.transfer import partition
from volcano_pipelines.transfer.executor import Executor, Options, Outcome
from volcano_pipelines.transfer.plan import Action, Plan, PlanItem, same_mtime
from volcano_pipelines.transfer.progress import Progress as TransferProgress
from volcano_pipelines.transfer.result import tally
from volcano_pipelines.transfer.sources import Auth, open_source
from volcano_pipelines.transfer.urls import parse_source

__all__ = ["PROGRESS_EVERY_SECONDS", "in_place", "run_part"]
log = logging.getLogger(__name__)

PROGRESS_EVERY_SECONDS = 5.0
ALREADY_IN_PLACE = "already in place (an earlier attempt of this partition)"


def in_place(root: str, item: PlanItem) -> PlanItem:
    """A file to copy that is already in place, complete (same size and mtime as planned: the
    final name only ever holds a complete, verified file) becomes a skip."""
    if item.action is not Action.COPY:
        return item  # COMPARE: the content is compared anyway
    try:
        st = os.stat(os.path.join(root, item.path))
    except OSError:
        return item
    if st.st_size == item.size and same_mtime(st.st_mtime_ns // 1_000_000, item.mtime_ms):
        return item._replace(action=Action.SKIP, reason=ALREADY_IN_PLACE)
    return item


class _Counters(TransferProgress):
    """The executor's counters, saved to progress-NNNNN.json every few seconds (and logged)."""

    def __init__(self, root: str, run_id: str, part: int, pod: str, every: float) -> None:
        super().__init__()
        self.where = (root, run_id)
        self.part, self.pod, self.every = part, pod, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="part-progress", daemon=True)

    def snapshot(self) -> partition.Progress:
        with self.lock:
            return partition.Progress(self.part, self.files_done, self.bytes_done, self.files_total, self.bytes_total,
                                      self.pod)

    def save(self) -> None:
        try:
            partition.save_progress(*self.where, self.snapshot())
        except OSError as err:  # progress is for people; the copy goes on
            log.warning("could not save progress: %s", err)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.save()
            now = self.snapshot()
            log.info("partition %d: files %d/%d, %.1f/%.1f MB", self.part, now.files_done, now.files,
                     now.bytes_done / 1e6, now.bytes / 1e6)

    def __enter__(self) -> _Counters:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.save()


def run_part(root: str, run_id: str, index: int, *, pod: str = "",
             every: float = PROGRESS_EVERY_SECONDS) -> partition.PartResult:
    """Copy partition `index` of run `run_id` under `root`; the result is also saved as
    result-NNNNN.json. Raises WorkFailed when the run or the partition is not there."""
    record = partition.load_run(root, run_id)
    if record is None:
        raise WorkFailed(f"no sync run {run_id} under {root} (its run.json is missing)")
    if not 0 <= index < record.parts:
        raise WorkFailed(f"run {run_id} has partitions 0 to {record.parts - 1}, not {index}")
    partition.clear_result(root, run_id, index)
    items = [in_place(root, item) for item in partition.load_part(root, run_id, index)]
    work = [item for item in items if item.action is not Action.SKIP]
    started = time.monotonic()
    if record.hadoop_conf_dir:  # an HA name service is resolved from it (transfer/urls.py)
        os.environ["HADOOP_CONF_DIR"] = record.hadoop_conf_dir
    source = open_source(parse_source(record.src), Auth(record.user, record.kerberos_principal, record.kerberos_keytab,
                                                        record.kerberos_ccache, record.hadoop_conf_dir))
    try:
        with _Counters(root, run_id, index, pod, every) as counters:
            counters.start(len(work), sum(item.size for item in work))
            executor = Executor(source, root, Options(**record.options), progress=counters.advance,
                                done=counters.file_done)
            outcomes = executor.run(Plan(items=tuple(items), selected=()))
    finally:
        source.close()
    result = _tally(index, pod, outcomes)
    result.read_path = source.read_path
    earlier = [item for item in items if item.reason == ALREADY_IN_PLACE]
    result.copied_before, result.bytes_before = len(earlier), sum(item.size for item in earlier)
    result.skipped -= len(earlier)
    result.duration_s = round(time.monotonic() - started, 3)
    if executor.fatal is not None:
        result.fatal = str(executor.fatal)
    partition.save_result(root, run_id, result)
    return result


def _tally(index: int, pod: str, outcomes: list[Outcome]) -> partition.PartResult:
    # Every failure listed: the coordinator keeps failed files out of the shard manifests.
    return partition.PartResult(part=index, pod=pod, **vars(tally(outcomes)))
