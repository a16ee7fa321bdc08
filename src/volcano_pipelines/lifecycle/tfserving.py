"""TF Serving's side of the serve step (pure): the export layout it needs, the model status
its REST API reports, and which old versions may be pruned.

Export contract: training writes a SavedModel to `<log PVC>/export/<model>/<version>/` with
an integer version. TF Serving watches the model's base path and loads numbered
subdirectories only; a SavedModel anywhere else is never found ("No versions of servable
<model> found under base path").

REST status (`GET /v1/models/<name>`), as TF Serving documents it:

    {"model_version_status": [{"version": "1", "state": "AVAILABLE",
                               "status": {"error_code": "OK", "error_message": ""}}]}

`version` is an int64 and arrives as a JSON string (proto3 JSON) or a number; `state` is one
of UNKNOWN, START, LOADING, AVAILABLE, UNLOADING, END. The server answers this while a
version is still LOADING, so an HTTP 200 does not mean "the model is served".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AVAILABLE",
    "SAVED_MODEL_FILES",
    "STATES",
    "ExportLayout",
    "ModelStatus",
    "VersionStatus",
    "check_export_layout",
    "model_readiness",
    "parse_model_status",
    "versions_to_prune",
]

AVAILABLE = "AVAILABLE"
STATES = ("UNKNOWN", "START", "LOADING", "AVAILABLE", "UNLOADING", "END")
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")
_OK_CODES = frozenset({"", "OK", "0", 0})


@dataclass(frozen=True)
class VersionStatus:
    version: int
    state: str
    error_code: str = "OK"
    error_message: str = ""

    @property
    def error(self) -> str | None:
        if str(self.error_code) in _OK_CODES and not self.error_message:
            return None
        return f"{self.error_code}: {self.error_message}".rstrip(": ")


@dataclass(frozen=True)
class ModelStatus:
    ready: bool  # every version waited for is AVAILABLE
    failed: bool  # a version waited for ended with an error: waiting longer cannot help
    served: tuple[int, ...]  # versions AVAILABLE now
    message: str


def parse_model_status(body: Any) -> list[VersionStatus]:
    """The versions in a `GET /v1/models/<name>` answer. An answer without
    `model_version_status` (TF Serving's `{"error": ...}` body) has no versions. TypeError /
    ValueError for an answer that is not in this format."""
    if not isinstance(body, Mapping):
        raise TypeError(f"a JSON object, not {type(body).__name__}")
    entries = body.get("model_version_status")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise TypeError("model_version_status is not a list")
    out: list[VersionStatus] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise TypeError("a model_version_status entry is not an object")
        try:
            version = int(str(entry.get("version")))
        except ValueError:
            raise ValueError(f"version {entry.get('version')!r} is not an integer") from None
        status = entry.get("status") or {}
        out.append(VersionStatus(version=version, state=str(entry.get("state") or "UNKNOWN"),
                                 error_code=str(status.get("error_code", "OK")),
                                 error_message=str(status.get("error_message") or "")))
    return out


def model_readiness(body: Any, want: Sequence[int] | None = None) -> ModelStatus:
    """Whether the model is served: every version in `want` AVAILABLE (None: at least one
    version). A version in `want` that reached END, or carries an error, failed to load."""
    error = body.get("error") if isinstance(body, Mapping) else None
    try:
        versions = parse_model_status(body)
    except (TypeError, ValueError) as err:
        return ModelStatus(False, False, (), f"unexpected model status answer: {err}")
    served = tuple(sorted(v.version for v in versions if v.state == AVAILABLE))
    if not versions:
        return ModelStatus(False, False, served, f"no version loaded yet{f': {error}' if error else ''}")
    by_version = {v.version: v for v in versions}
    states = ", ".join(f"{v.version}: {v.state}" + (f" ({v.error})" if v.error else "") for v in sorted(versions, key=lambda v: v.version))
    if want:
        for version in want:
            entry = by_version.get(version)
            if entry is not None and (entry.state == "END" or (entry.error and entry.state != AVAILABLE)):
                return ModelStatus(False, True, served, f"version {version} failed to load: {entry.error or entry.state}")
        missing = [v for v in want if by_version.get(v) is None or by_version[v].state != AVAILABLE]
        if missing:
            return ModelStatus(False, False, served, f"waiting for version(s) {', '.join(map(str, missing))} (states {states})")
        return ModelStatus(True, False, served, f"version(s) {', '.join(map(str, want))} AVAILABLE")
    if served:
        return ModelStatus(True, False, served, f"version(s) {', '.join(map(str, served))} AVAILABLE")
    if all(v.state == "END" for v in versions):
        errors = "; ".join(f"{v.version}: {v.error}" for v in versions if v.error)
        return ModelStatus(False, True, served, f"no version could be loaded ({errors or states})")
    return ModelStatus(False, False, served, f"waiting for a version to load (states {states})")


@dataclass(frozen=True)
class ExportLayout:
    versions: tuple[int, ...]  # numbered version directories, ascending
    problems: tuple[str, ...]  # what makes TF Serving fail: the step refuses to deploy
    warnings: tuple[str, ...] = field(default=())  # what TF Serving ignores

    @property
    def ok(self) -> bool:
        return not self.problems


def _is_version(name: str) -> bool:
    return name.isascii() and name.isdigit() and len(name) <= 18  # int64


def check_export_layout(model_dir: str, listing: Mapping[str, Sequence[str] | None] | None) -> ExportLayout:
    """The model directory as TF Serving will see it. `listing` maps each entry of the model
    directory to its own entries (None for a file); None means the directory does not exist."""
    if listing is None:
        return ExportLayout((), (f"{model_dir} does not exist",))
    files = sorted(name for name, inner in listing.items() if inner is None)
    dirs = {name: inner for name, inner in listing.items() if inner is not None}
    numbered = {name: inner for name, inner in dirs.items() if _is_version(name)}
    other = sorted(set(dirs) - set(numbered))
    problems: list[str] = []
    warnings: list[str] = []
    root_model = [f for f in files if f in SAVED_MODEL_FILES]
    if not numbered:
        if root_model:
            problems.append(f"{model_dir} holds {root_model[0]} directly: TF Serving loads only numbered version "
                            f"directories (move the SavedModel to {model_dir.rstrip('/')}/1/)")
        elif other:
            problems.append(f"{model_dir} has no numbered version directory (found {', '.join(other)}): TF Serving "
                            "would report 'No versions of servable found'; export to <model>/<integer version>/")
        else:
            problems.append(f"{model_dir} has no version directories: export to <model>/<integer version>/")
        return ExportLayout((), tuple(problems))
    by_number: dict[int, list[str]] = {}
    for name in numbered:
        by_number.setdefault(int(name), []).append(name)
    for number, names in sorted(by_number.items()):
        if len(names) > 1:
            problems.append(f"version {number} appears as {' and '.join(sorted(names))}")
    for name, inner in sorted(numbered.items(), key=lambda item: int(item[0])):
        if not any(f in SAVED_MODEL_FILES for f in inner or ()):
            problems.append(f"{model_dir.rstrip('/')}/{name} has no saved_model.pb (an unfinished or failed export?)")
    if other:
        warnings.append(f"{model_dir} also holds {', '.join(other)}: not numbered, ignored by TF Serving")
    return ExportLayout(tuple(sorted(by_number)), tuple(problems), tuple(warnings))


def versions_to_prune(versions: Iterable[int], keep: int, protect: Iterable[int] = ()) -> list[int]:
    """The version directories to delete so that the `keep` newest remain; never one in
    `protect` (the served ones), never more than len(versions) - keep, never with keep < 1."""
    ordered = sorted(set(versions), reverse=True)
    if keep < 1:
        return []
    kept = set(ordered[:keep]) | set(protect)
    return sorted(v for v in ordered[keep:] if v not in kept)
