"""A sync run split over copy pods (`--workers N`, docs/sync.md): the coordinator plans once,
splits the files to copy into N size-balanced partitions and writes them, with what every
pod needs to know, under the destination's own directory:

    DST/.vpipe/runs/<run-id>/run.json          the run: source, options, the plan's other decisions
    DST/.vpipe/runs/<run-id>/part-00000.json   partition 0: the files pod 0 copies
    DST/.vpipe/runs/<run-id>/result-00000.json what pod 0 did (written once, at its end)
    DST/.vpipe/runs/<run-id>/progress-00000.json  pod 0's counters so far (rewritten as it goes)

There, a retried step finds the run (it attaches to the copy job instead of planning again)
and a retried pod finds its partition. Splitting and summing are pure; the file I/O is the
few small functions at the end."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from volcano_pipelines.transfer.dest import write_file_atomic
from volcano_pipelines.transfer.plan import RESERVED_DIR, Action, Entry, PlanItem, shard_by_bytes
from volcano_pipelines.transfer.result import Tally

__all__ = ["FORMAT", "PartResult", "Progress", "RunRecord", "check_run_id", "load_part", "load_progress",
           "load_result", "load_run", "part_sizes", "remove_run", "run_dir", "save_part", "save_progress",
           "save_result", "save_run", "split"]

FORMAT = 1
RUNS_DIR = "runs"
# A run id names a directory: letters, digits, '.', '_' and '-' (a UUID, a KFP run id, an Argo
# workflow uid, the 16 hex digits vpipe makes), not starting with '.'.
_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def check_run_id(run_id: str) -> str | None:
    """Why `run_id` cannot name a run directory, or None when it can."""
    return None if _RUN_ID.fullmatch(run_id) else "1 to 128 letters, digits, '.', '_' or '-', not starting with '.'"


def split(work: Sequence[PlanItem], count: int) -> list[list[PlanItem]]:
    """The files to copy in `count` partitions balanced by bytes (largest first, each to the
    lightest partition: totals within one largest file of each other), every file in exactly
    one. A partition's items keep the plan's order. Never more partitions than files."""
    count = max(1, min(count, len(work)))
    by_path = {item.path: item for item in work}
    shards = shard_by_bytes((Entry(i.path, i.size, i.mtime_ms) for i in work), count)
    return [[by_path[path] for path in shard.paths] for shard in shards]


def part_sizes(parts: Sequence[Sequence[PlanItem]]) -> list[tuple[int, int]]:
    """(files, bytes) of each partition."""
    return [(len(part), sum(item.size for item in part)) for part in parts]


@dataclass
class RunRecord:
    """run.json: what the copy pods read (source, options) and what the coordinator needs to
    finish a run it attached to (the plan's decisions other than the copies)."""

    run_id: str
    src: str  # the source URL as the user gave it (the pods parse it again)
    user: str | None  # simple-auth user
    options: dict[str, Any]  # transfer/executor.Options fields
    parts: int
    job: str  # the copy job's name
    files_selected: int = 0
    bytes_selected: int = 0
    # [path, size, mtime_ms] of every selected file: the shard manifests are written from it.
    selected: list[list[Any]] = field(default_factory=list)
    # [path, reason] of the --delete deletions, carried out once the copy job has ended.
    deletes: list[list[str]] = field(default_factory=list)
    # What the coordinator did itself before the job (skipped, cleaned, failed, deleted).
    before: dict[str, int] = field(default_factory=dict)
    failures_before: list[dict[str, str]] = field(default_factory=list)
    # Kerberos and Hadoop client settings, as paths the copy pods see too (the step pod's Secret
    # and ConfigMap volumes, mounted in the copy pods at the same places): transfer/sources.Auth.
    kerberos_principal: str | None = None
    kerberos_keytab: str | None = None
    kerberos_ccache: str | None = None
    hadoop_conf_dir: str | None = None
    format: int = FORMAT

    def selected_entries(self) -> list[Entry]:
        return [Entry(str(p), int(s), int(m)) for p, s, m in self.selected]


@dataclass
class PartResult(Tally):
    """result-NNNNN.json: what one pod did with its partition (its outcomes counted, every failure
    listed; `skipped`: the same content, with --checksum)."""

    part: int = 0
    pod: str = ""
    # Files of the partition an earlier attempt copied (found complete in place): copied by the run.
    copied_before: int = 0
    bytes_before: int = 0
    duration_s: float = 0.0
    fatal: str | None = None  # why the pod stopped early (destination full, source unreachable)
    read_path: str | None = None  # how the pod read file data (SyncResult.read_path)

    @property
    def throughput_mb_s(self) -> float:
        return round(self.bytes_copied / 1e6 / self.duration_s, 2) if self.duration_s > 0 else 0.0


@dataclass
class Progress:
    """progress-NNNNN.json: one pod's counters so far."""

    part: int
    files_done: int = 0
    bytes_done: int = 0
    files: int = 0
    bytes: int = 0
    pod: str = ""


# ---------------------------------------------------------------------------- files


def run_dir(root: str, run_id: str) -> str:
    return os.path.join(root, RESERVED_DIR, RUNS_DIR, run_id)


def _part_file(root: str, run_id: str, kind: str, index: int) -> str:
    return os.path.join(run_dir(root, run_id), f"{kind}-{index:05d}.json")


def _write(path: str, body: Any) -> None:
    write_file_atomic(path, json.dumps(body, separators=(",", ":")).encode())


def _read(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save_run(root: str, record: RunRecord, parts: Sequence[Sequence[PlanItem]]) -> None:
    """The partitions first, run.json last: a run directory with run.json is complete."""
    os.makedirs(run_dir(root, record.run_id), exist_ok=True)
    for index, part in enumerate(parts):
        save_part(root, record.run_id, index, part)
    _write(os.path.join(run_dir(root, record.run_id), "run.json"), asdict(record))


def load_run(root: str, run_id: str) -> RunRecord | None:
    """The run's record, or None when no complete run of that id is there."""
    try:
        body = _read(os.path.join(run_dir(root, run_id), "run.json"))
    except FileNotFoundError:
        return None
    if body.get("format") != FORMAT:
        raise ValueError(f"run {run_id}: run.json has format {body.get('format')!r}, this version reads {FORMAT}")
    return RunRecord(**body)


def save_part(root: str, run_id: str, index: int, items: Iterable[PlanItem]) -> None:
    _write(_part_file(root, run_id, "part", index),
           {"items": [[i.action.value, i.path, i.size, i.mtime_ms] for i in items]})


def load_part(root: str, run_id: str, index: int) -> list[PlanItem]:
    body = _read(_part_file(root, run_id, "part", index))
    return [PlanItem(Action(action), path, "planned", size, mtime) for action, path, size, mtime in body["items"]]


def save_result(root: str, run_id: str, result: PartResult) -> None:
    _write(_part_file(root, run_id, "result", result.part), asdict(result))


def load_result(root: str, run_id: str, index: int) -> PartResult | None:
    try:
        return PartResult(**_read(_part_file(root, run_id, "result", index)))
    except FileNotFoundError:
        return None


def clear_result(root: str, run_id: str, index: int) -> None:
    """A pod starting (again) on its partition: an earlier attempt's result no longer holds."""
    try:
        os.unlink(_part_file(root, run_id, "result", index))
    except FileNotFoundError:
        pass


def save_progress(root: str, run_id: str, progress: Progress) -> None:
    _write(_part_file(root, run_id, "progress", progress.part), asdict(progress))


def load_progress(root: str, run_id: str, index: int) -> Progress | None:
    """A pod's counters, or None before it wrote any (or while it replaces them)."""
    try:
        return Progress(**_read(_part_file(root, run_id, "progress", index)))
    except (FileNotFoundError, ValueError):
        return None


def remove_run(root: str, run_id: str) -> None:
    shutil.rmtree(run_dir(root, run_id), ignore_errors=True)
