"""Where a job's post-mortem record goes and how it is made on the cluster: collected
(postmortem/reads.py), built (postmortem/record.py, pure) and saved as `<ns>/<job>.json` plus
`<ns>/<job>.md` under one directory:

- the local backend: `<log_dir>/post-mortem/` (beside the pods' logs);
- otherwise `$VPIPE_POST_MORTEM_DIR` when set (a pipeline points it at an output directory
  or a mounted logs volume), else `$XDG_STATE_HOME/volcano-pipelines/post-mortem`
  (`~/.local/state/...`), where `vpipe status --post-mortem JOB` finds it;
- in a pipeline, also a copy under `$VPIPE_POST_MORTEM_VOLUME_DIR` (the step pod's mount of the
  run's log PVC: the record is kept next to the run's logs). A copy that cannot be written
  there (a root-owned volume the non-root step pod may not write) is a note in the record and
  the result, never a failed step.

`save_post_mortem` is the one call for anything that is about to delete a job (the train
step's cleanup, the exit handler): it never raises; what went wrong is in the summary it
returns."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from volcano_pipelines.k8s.client import Cluster
from volcano_pipelines.k8s.pods import MissingInfo
from volcano_pipelines.postmortem import POST_MORTEM_DIR_ENV, POST_MORTEM_VOLUME_DIR_ENV
from volcano_pipelines.postmortem import reads as collect
from volcano_pipelines.postmortem.markdown import markdown
from volcano_pipelines.postmortem.record import Limits, build_record, log_pods

__all__ = ["DIR_ENV", "VOLUME_DIR_ENV", "copy_directories", "default_directory", "load_post_mortem", "record_paths",
           "save_post_mortem", "write_record"]

log = logging.getLogger(__name__)
DIR_ENV = POST_MORTEM_DIR_ENV
VOLUME_DIR_ENV = POST_MORTEM_VOLUME_DIR_ENV
SUMMARY_CHARS = 16 * 1024


def default_directory() -> Path:
    if os.environ.get(DIR_ENV):
        return Path(os.environ[DIR_ENV])
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "volcano-pipelines" / "post-mortem"


def copy_directories() -> tuple[Path, ...]:
    """Where copies of a cluster job's record go besides default_directory(): the log volume
    a pipeline mounts into the step pod ($VPIPE_POST_MORTEM_VOLUME_DIR), when set."""
    given = os.environ.get(VOLUME_DIR_ENV)
    return (Path(given),) if given else ()


def record_paths(namespace: str, name: str, directory: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    base = Path(directory) if directory is not None else default_directory()
    return base / namespace / f"{name}.json", base / namespace / f"{name}.md"


def namespaces_with_record(name: str, directory: str | os.PathLike[str] | None = None) -> list[str]:
    """The namespaces that hold a saved record of job `name`, sorted (for `vpipe status
    --post-mortem` without `-n`: the records are local files, so no cluster is needed)."""
    base = Path(directory) if directory is not None else default_directory()
    try:
        return sorted(entry.name for entry in base.iterdir() if (entry / f"{name}.json").is_file())
    except OSError:
        return []


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_files(record: Mapping[str, Any], directory: str | os.PathLike[str] | None) -> tuple[Path, Path]:
    """The record and its Markdown summary under `directory`, each through a temporary file and
    a rename, so a reader never sees half a record."""
    job = record.get("job") or {}
    json_path, md_path = record_paths(str(job.get("namespace") or "default"), str(job.get("name") or "job"), directory)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((json_path, json.dumps(record, separators=(",", ":"), sort_keys=True)), (md_path, markdown(record))):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):  # gone after the rename; a half-written one is not left behind
                tmp.unlink(missing_ok=True)
    return json_path, md_path


def write_record(record: Mapping[str, Any], directory: str | os.PathLike[str] | None = None,
                 copies: Sequence[str | os.PathLike[str]] = ()) -> dict[str, Any]:
    """Save the record and its Markdown summary under `directory` (default_directory() when
    None), and the same files under each of `copies` (whose parent, a mount point, must
    exist). The copies are written first: one that
    fails (a volume the step may not write) becomes a note in the record saved under
    `directory` and in the result, and never an error; only `directory` itself may raise.
    Returns where (`copies`: the copies written, {json, markdown} each), and how big."""
    notes = list(record.get("notes") or [])
    written: list[dict[str, str]] = []
    for copy in copies:
        try:
            # The copy's parent is the volume's mount point: never made here, so a pod without
            # the mount (kfp.local applies a task's env but not its volumes) writes no copy
            # into its own filesystem.
            if not Path(copy).parent.is_dir():
                raise FileNotFoundError(f"{Path(copy).parent} does not exist (is the volume mounted?)")
            copy_json, copy_md = _write_files(record, copy)
        except OSError as err:
            log.warning("post-mortem copy under %s not written: %s", copy, err)
            notes.append(f"the copy under {copy} was not written: {err}")
        else:
            written.append({"json": str(copy_json), "markdown": str(copy_md)})
    if len(notes) != len(record.get("notes") or []):
        record = {**record, "notes": notes}
    json_path, md_path = _write_files(record, directory)
    # A short summary travels in the step's result (KFP's Markdown output shows it).
    short = markdown(record, table_rows=20, log_lines=10, events=10)
    if len(short) > SUMMARY_CHARS:
        short = short[:SUMMARY_CHARS] + f"\n\n... (cut; the whole summary is {md_path})\n"
    return {"json": str(json_path), "markdown": str(md_path), "bytes": int(record.get("bytes") or 0),
            "pods": len(record.get("pods") or []), "notes": notes, "summary": short, "copies": written}


def save_post_mortem(
    cluster: Cluster,
    namespace: str,
    name: str,
    *,
    directory: str | os.PathLike[str] | None = None,
    job: dict[str, Any] | None = None,
    seen_pods: Sequence[dict[str, Any]] = (),
    deleted: Iterable[str] = (),
    restarts: Sequence[Mapping[str, Any]] = (),
    kept_logs: Mapping[str, Mapping[str, str | None]] | None = None,
    lost_logs: Mapping[str, str] | None = None,
    limits: Limits = Limits(),
    missing: MissingInfo | None = None,
    copies: Sequence[str | os.PathLike[str]] | None = None,
    stalled: Mapping[str, Any] | None = None,
    cancelled: str | None = None,
) -> dict[str, Any]:
    """Collect, build and save job `namespace/name`'s post-mortem record; call it before
    anything deletes the job or its pods. `seen_pods` / `deleted`: pods a watch saw that may
    be gone now (their uids in `deleted`); `restarts`: the step's restart records; `kept_logs`:
    pod uid -> container -> the last log lines read from a pod before it was deleted; `lost_logs`:
    pod uid -> why a failed pod's lines could not be read before it went (a note each); `copies`:
    further directories for the same files (None: copy_directories(), the pipeline's log
    volume). Returns {json, markdown, bytes, pods, seconds, notes, copies} or {error, seconds};
    never raises."""
    started = time.monotonic()
    try:
        missing = missing or MissingInfo()
        state = collect.read_state(cluster, namespace, name, seen_pods=seen_pods, job=job, missing=missing)
        if state.job is None:
            return {"error": f"job {namespace}/{name} not found: no post-mortem record",
                    "seconds": round(time.monotonic() - started, 3)}
        gone = set(state.deleted) | set(deleted)
        notes = list(state.notes)
        alive = [p for p in log_pods(state.job, state.pods, limits) if (p.get("metadata") or {}).get("uid") not in gone]
        logs: dict[str, Mapping[str, str | None]] = dict(
            collect.read_logs(cluster, namespace, alive, limits.log_lines, limits.line_chars, notes, missing))
        # A pod still there is read now (its log is longer); one that is gone has only what was kept.
        logs.update({uid: kept for uid, kept in (kept_logs or {}).items() if uid in gone})
        notes += [why for uid, why in (lost_logs or {}).items() if uid in gone]
        record = build_record(state.job, state.pods, state.events, logs, collected_at=now_rfc3339(), deleted=gone,
                              restarts=restarts, notes=notes, limits=limits, stalled=stalled,
                              cancelled=cancelled)
        saved = write_record(record, directory, copy_directories() if copies is None else copies)
    except Exception as err:  # noqa: BLE001 - a record is written on the way out; it must not fail the step
        log.warning("post-mortem of job %s/%s not written: %s", namespace, name, err)
        return {"error": f"post-mortem not written: {err}", "seconds": round(time.monotonic() - started, 3)}
    saved["seconds"] = round(time.monotonic() - started, 3)
    log.info("post-mortem of job %s/%s: %s (%d bytes, %d pods, %.1fs)", namespace, name, saved["markdown"],
             saved["bytes"], saved["pods"], saved["seconds"])
    return saved


def load_post_mortem(namespace: str, name: str, directory: str | os.PathLike[str] | None = None
                     ) -> tuple[dict[str, Any], str] | None:
    """The saved record and its Markdown summary, or None when there is none."""
    json_path, md_path = record_paths(namespace, name, directory)
    try:
        record = json.loads(json_path.read_text())
    except (OSError, ValueError):
        return None
    try:
        text = md_path.read_text()
    except OSError:
        text = markdown(record)
    return record, text
