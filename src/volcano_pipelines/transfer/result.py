"""What a sync reports: `SyncResult` (counts, bytes, failures, the dry-run plan) and the
errors that carry it (`SyncFailed`, `DeletionRefused`, `SyncInterrupted`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from volcano_pipelines.errors import InputError, VpipeError, WorkFailed
from volcano_pipelines.outputs import WHOLE, Output
from volcano_pipelines.transfer.executor import Outcome, Result
from volcano_pipelines.transfer.plan import DeleteRefusal, display_path, utf8_path

__all__ = ["EXIT_INTERRUPTED", "MAX_LISTED_FAILURES", "DeletionRefused", "SyncFailed", "SyncInterrupted", "SyncResult",
           "Tally", "tally"]

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
MAX_LISTED_FAILURES = 100  # failures a report lists (the count has them all)


@dataclass
class Tally:
    """What a list of outcomes adds up to (every failure listed: a report caps what it shows)."""

    copied: int = 0
    skipped: int = 0
    deleted: int = 0
    cleaned: int = 0
    failed: int = 0
    interrupted: int = 0
    retried: int = 0  # needed more than one attempt
    bytes_copied: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)


def tally(outcomes: list[Outcome]) -> Tally:
    out = Tally()
    for o in outcomes:
        if o.attempts > 1:
            out.retried += 1
        if o.result == Result.COPIED:
            out.copied += 1
            out.bytes_copied += o.bytes
        elif o.result == Result.SKIPPED:
            out.skipped += 1
        elif o.result == Result.DELETED:
            out.deleted += 1
        elif o.result == Result.CLEANED:
            out.cleaned += 1
        elif o.result == Result.INTERRUPTED:
            out.interrupted += 1
        else:
            out.failed += 1
            out.failures.append({"path": o.path, "error": o.error or "failed"})
    return out


@dataclass
class SyncResult:
    # The sync step's output parameters (the KFP component's; steps/registry.py reads them).
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
    # How file data was read (docs/sync.md): "hdfs-readinto" (the patched hdfs-native), "hdfs-packets"
    # (the stock one), "webhdfs-readinto", "local-readinto", "fsspec-read"; None before a source was opened.
    read_path: str | None = None
    duration_s: float = 0.0
    throughput_mb_s: float = 0.0
    failures: list[dict[str, str]] = field(default_factory=list)
    shard_manifests: list[str] = field(default_factory=list)
    # --workers N: one line per copy pod (its partition, pod, counts, MB/s); empty for one process.
    workers: list[dict[str, Any]] = field(default_factory=list)
    plan: list[dict[str, Any]] = field(default_factory=list)  # dry run only
    error: str | None = None  # why the run stopped or failed (the error the caller sees)

    def add(self, counted: Tally) -> None:
        """Outcomes counted (a part of the run) into the report; failures listed up to the cap."""
        for name in ("copied", "skipped", "deleted", "cleaned", "failed", "interrupted", "retried", "bytes_copied"):
            setattr(self, name, getattr(self, name) + getattr(counted, name))
        self.failures.extend(counted.failures[:max(0, MAX_LISTED_FAILURES - len(self.failures))])

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
