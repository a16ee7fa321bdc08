"""Pure planning for `sync`: filters, safe names, copy / skip / delete decisions, shards.

Nothing here touches a file system: listings come in as `Entry` values, a `Plan` comes
out. Paths are relative, '/'-separated, and never start with '/' or contain '..'.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from operator import attrgetter
from typing import NamedTuple

# Everything the engine keeps in the destination lives under this directory (shard
# manifests, the lock); it is never synced, compared or deleted as data.
RESERVED_DIR = ".vpipe"
# Temporary names: ".<name>.vpipe-tmp-<token>" next to the final name.
TEMP_MARK = ".vpipe-tmp-"
_TEMP_RE = re.compile(r"^\..+\.vpipe-tmp-[0-9a-f]{8,32}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class Entry(NamedTuple):
    """One regular file: relative path, size in bytes, modification time in milliseconds
    (HDFS keeps milliseconds; local times are truncated to them). A named tuple, not a
    dataclass: listings hold one per file and a tuple is several times cheaper to build."""

    path: str
    size: int
    mtime_ms: int


class Action(str, Enum):
    COPY = "copy"  # write it (new, or size/mtime differs)
    COMPARE = "compare"  # --checksum with equal sizes: hash both, copy only when different
    SKIP = "skip"  # same size and mtime
    DELETE = "delete"  # --delete: in the destination, not in the (filtered) source
    CLEANUP = "cleanup"  # a temporary file left by an interrupted run
    REJECT = "reject"  # a hostile or unusable name: never written


# Why a destination file is deleted: only NOT_IN_SOURCE deletions are `--delete`'s (and
# count against its guard); IN_THE_WAY ones make room for a source directory.
NOT_IN_SOURCE = "not in source"
IN_THE_WAY = "a file where the source has a directory"


class PlanItem(NamedTuple):
    action: Action
    path: str
    reason: str
    size: int = 0
    mtime_ms: int = 0


@dataclass(frozen=True)
class Plan:
    items: tuple[PlanItem, ...]
    selected: tuple[Entry, ...]  # every source file that passed the filters (copy + skip + compare)
    excluded: int = 0  # source entries left out by --include / --exclude

    def of(self, *actions: Action) -> list[PlanItem]:
        return [item for item in self.items if item.action in actions]

    def counts(self) -> dict[str, int]:
        out = {action.value: 0 for action in Action}
        for item in self.items:
            out[item.action.value] += 1
        return out

    @property
    def bytes_to_copy(self) -> int:
        return sum(item.size for item in self.items if item.action in (Action.COPY, Action.COMPARE))


# ---------------------------------------------------------------------------- names


def plainly_safe(path: str) -> bool:
    """The fast path of `unsafe_reason` (a plan checks every file): a short printable path
    with no backslash, no empty component and no component starting with '.' passes every
    check there. False means "run the full checks", not "unsafe"."""
    return (
        0 < len(path) <= 255
        and path.isprintable()
        and path[0] not in "/."
        and path[-1] != "/"
        and "/." not in path
        and "//" not in path
        and "\\" not in path
        and len(path.encode("utf-8", "surrogateescape")) <= 255
    )


def unsafe_reason(path: str) -> str | None:
    """Why a relative path may not be written under the destination, or None if it may."""
    return None if plainly_safe(path) else full_unsafe_reason(path)


def full_unsafe_reason(path: str) -> str | None:
    """Every check of `unsafe_reason`, without the fast path."""
    if not path:
        return "empty name"
    if "\x00" in path:
        return "NUL byte in name"
    if not is_utf8(path):
        # Only a local source can list one (HDFS names are Unicode). Manifests, reports
        # and JSON are UTF-8, and a reader in a training pod would fail on it.
        return "name is not valid UTF-8"
    if path.startswith("/"):
        return "absolute path"
    if "\\" in path:
        return "backslash in name"
    if _CONTROL_RE.search(path):
        return "control character in name"
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return f"path component {part!r} would escape or alias the destination"
    if parts[0] == RESERVED_DIR:
        return f"{RESERVED_DIR}/ is reserved for the sync engine"
    if is_temp_name(parts[-1]):
        return "looks like a sync temporary file"
    if any(len(part) > 63 and len(part.encode("utf-8", "surrogateescape")) > 255 for part in parts):
        return "a path component is longer than 255 bytes"
    return None


def is_utf8(path: str) -> bool:
    """False for a name with bytes that are not UTF-8 (os functions hand them over as
    lone surrogates, 'surrogateescape')."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def utf8_path(path: str) -> str:
    """A path as JSON reports carry it: its bytes that are not UTF-8 written as \\xNN, so
    the report is valid Unicode (no lone surrogates)."""
    if is_utf8(path):
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def display_path(path: str) -> str:
    """A path as a terminal is shown it: `utf8_path`, and control characters as \\xNN
    too (no escape sequences reach the terminal)."""
    if path.isprintable():
        return path
    return _CONTROL_RE.sub(lambda m: f"\\x{ord(m.group()):02x}", utf8_path(path))


def quoted_path(path: str) -> str:
    """A path quoted in a message: repr() of the name, or of its bytes when they are not
    UTF-8 (b'bad\\xff.bin'): every character escaped, nothing ambiguous."""
    return repr(path) if is_utf8(path) else repr(path.encode("utf-8", "surrogateescape"))


def is_temp_name(name: str) -> bool:
    return bool(_TEMP_RE.match(name))


def temp_name(name: str, token: str) -> str:
    """The temporary sibling a file is written to before the atomic rename."""
    # Keep it under the 255-byte component limit even for long names.
    stem = name if len(name.encode()) <= 200 else name.encode()[:200].decode("utf-8", "ignore")
    return f".{stem}{TEMP_MARK}{token}"


# ---------------------------------------------------------------------------- filters


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """'**' crosses directories, '*' and '?' do not, '[...]' is a class. A pattern without
    '/' matches the file's base name anywhere; with '/' it matches the whole relative path."""
    anchored = "/" in pattern.strip("/") or pattern.startswith("/")
    pat = pattern.lstrip("/")
    out: list[str] = []
    i = 0
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pat.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pat.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pat[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\").replace("[", "\\[") + "]")  # a "[" inside: literal
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    body = "".join(out)
    if pat.endswith("/"):  # "dir/" selects everything below dir
        body += ".*"
    return re.compile(("" if anchored else r"(?:.*/)?") + body + r"\Z")


def _unclosed_class(pattern: str) -> bool:
    """A '[' with no ']' after it (the class would be read as a literal '[')."""
    i = pattern.find("[")
    while i != -1:
        end = pattern.find("]", i + 1)
        if end == -1:
            return True
        i = pattern.find("[", end + 1)
    return False


def check_glob(pattern: str) -> str | None:
    if not pattern or "\x00" in pattern:
        return "a non-empty glob"
    if _unclosed_class(pattern):
        # Read literally, '[' would select only files named with a '[': almost surely a typo.
        return "a glob whose '[' starts a class closed by ']' (write [[] for a literal '[')"
    try:
        _glob_regex(pattern)
    except re.error as err:
        return f"a valid glob ({err})"
    return None


def selected(path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Included when no include globs are given or one matches, and no exclude glob matches."""
    if include and not any(_glob_regex(p).match(path) for p in include):
        return False
    return not any(_glob_regex(p).match(path) for p in exclude)


# ---------------------------------------------------------------------------- plan


def same_mtime(a_ms: int, b_ms: int) -> bool:
    # Some file systems keep only seconds; a difference under one second is "same" only
    # when one side is a whole second (so a truncated copy still matches).
    if a_ms == b_ms:
        return True
    return abs(a_ms - b_ms) < 1000 and (a_ms % 1000 == 0 or b_ms % 1000 == 0)


def build_plan(
    source: Iterable[Entry],
    dest: Iterable[Entry],
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    checksum: bool = False,
    delete: bool = False,
    dest_temps: Iterable[str] = (),
    rejected: Iterable[tuple[str, str]] = (),
) -> Plan:
    """Decide per file. `dest_temps` are leftover temporary files (always cleaned);
    `rejected` are (path, reason) pairs the source listing already refused (symlinks...)."""
    dest_by_path = {e.path: e for e in dest}
    items: list[PlanItem] = []
    chosen: list[Entry] = []
    seen: set[str] = set()
    excluded = 0
    for path, reason in rejected:
        if selected(path, include, exclude):
            items.append(PlanItem(Action.REJECT, path, reason))
            seen.add(path)
        else:
            excluded += 1
    filtering = bool(include or exclude)
    have_of = dest_by_path.get
    for entry in sorted(source, key=attrgetter("path")):
        path = entry.path
        if path in seen:
            continue
        if filtering and not selected(path, include, exclude):
            excluded += 1
            continue
        seen.add(path)
        bad = unsafe_reason(path)
        if bad:
            items.append(PlanItem(Action.REJECT, path, bad, entry.size, entry.mtime_ms))
            continue
        chosen.append(entry)
        have = have_of(path)
        if have == entry and not checksum:  # same path, size and mtime: the common re-sync case
            action, why = Action.SKIP, "same size and mtime"
        elif have is None:
            action, why = Action.COPY, "new"
        elif have.size != entry.size:
            action, why = Action.COPY, f"size {have.size} != {entry.size}"
        elif checksum:
            action, why = Action.COMPARE, "same size: compare content"
        elif not same_mtime(have.mtime_ms, entry.mtime_ms):
            action, why = Action.COPY, "mtime differs"
        else:
            action, why = Action.SKIP, "same size and mtime"
        items.append(PlanItem(action, path, why, entry.size, entry.mtime_ms))
    extra = sorted(dest_by_path.keys() - seen)
    if extra:
        # A source path that is a directory prefix of another can't also be a file; a
        # destination file where the source has a directory must go before copying into it.
        source_dirs = {p.rsplit("/", 1)[0] for p in seen if "/" in p}
        source_dirs = {d for p in source_dirs for d in _prefixes(p)}
        for path in extra:
            if path in source_dirs:
                items.append(PlanItem(Action.DELETE, path, IN_THE_WAY))
            elif delete and selected(path, include, exclude):
                items.append(PlanItem(Action.DELETE, path, NOT_IN_SOURCE))
    for path in sorted(dest_temps):
        items.append(PlanItem(Action.CLEANUP, path, "temporary file of an interrupted run"))
    return Plan(items=tuple(items), selected=tuple(chosen), excluded=excluded)


# ---------------------------------------------------------------------------- --delete guard


# `--delete` may remove at most this share of the destination's files unless told more
# (--max-delete) or forced (--force-delete): a source that lost most of its files is far
# more often a mistake (a half-written or wrong path) than a change to the dataset.
DEFAULT_MAX_DELETE = "50%"


@dataclass(frozen=True)
class DeleteLimit:
    """`--max-delete`: at most `count` files, or at most `percent` of the destination's."""

    count: int | None = None
    percent: float | None = None


def parse_max_delete(text: str) -> DeleteLimit | None:
    """"N" (a count) or "P%" (a share, 0 to 100); None when it is neither."""
    text = text.strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            return None
        return DeleteLimit(percent=percent) if 0 <= percent <= 100 else None  # NaN fails too
    return DeleteLimit(count=int(text)) if text.isdigit() else None


@dataclass(frozen=True)
class DeleteRefusal:
    """Why a plan's deletions are refused: `deletes` of the destination's `dest_files`,
    with nothing selected in the source (`empty_source`) or more than the limit."""

    deletes: int
    dest_files: int
    empty_source: bool


def check_deletions(plan: Plan, dest_files: int, limit: DeleteLimit) -> DeleteRefusal | None:
    """None when the plan's `--delete` deletions may go ahead. An empty source selection
    that would delete files is always refused, whatever the limit: it is what an unmounted
    directory or an emptied HDFS path looks like, not a change to a dataset."""
    deletes = sum(1 for i in plan.items if i.action is Action.DELETE and i.reason == NOT_IN_SOURCE)
    if not deletes:
        return None
    if not plan.selected:
        return DeleteRefusal(deletes, dest_files, empty_source=True)
    if limit.count is not None:
        over = deletes > limit.count
    else:
        over = deletes * 100 > (limit.percent or 0.0) * dest_files
    return DeleteRefusal(deletes, dest_files, empty_source=False) if over else None


def _prefixes(directory: str) -> list[str]:
    parts = directory.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def parent_dirs(paths: Iterable[str]) -> list[str]:
    """Every directory that must exist for `paths`, parents first."""
    dirs: set[str] = set()
    for path in paths:
        if "/" in path:
            dirs.update(_prefixes(path.rsplit("/", 1)[0]))
    return sorted(dirs, key=lambda d: (d.count("/"), d))


def transfer_order(items: Iterable[PlanItem]) -> list[PlanItem]:
    """The order files are handed to the transfer threads: big files first (the pool then
    finishes together instead of waiting on one big tail), and among files of a similar
    size (same power of two), one from each directory in turn. The kernel serializes
    creates and renames within one directory (each holds the directory lock for a FUSE
    round trip), so threads spread over directories run in parallel where threads in one
    directory queue behind each other."""
    by_dir: dict[str, list[PlanItem]] = {}
    for item in items:
        by_dir.setdefault(item.path.rsplit("/", 1)[0] if "/" in item.path else "", []).append(item)
    keyed: list[tuple[int, int, str, str, PlanItem]] = []
    for directory, group in by_dir.items():
        group.sort(key=lambda i: (-i.size, i.path))
        rank: dict[int, int] = {}
        for item in group:
            size_class = item.size.bit_length()
            turn = rank.get(size_class, 0)
            rank[size_class] = turn + 1
            keyed.append((-size_class, turn, directory, item.path, item))
    keyed.sort(key=lambda k: k[:4])
    return [k[4] for k in keyed]


# ---------------------------------------------------------------------------- shards


@dataclass
class Shard:
    index: int
    bytes: int = 0
    paths: list[str] = field(default_factory=list)


def shard_by_bytes(entries: Iterable[Entry], count: int) -> list[Shard]:
    """Greedy largest-first assignment to the lightest shard: every file in exactly one
    shard, deterministic, byte totals within one largest file of each other."""
    if count < 1:
        raise ValueError("shard count must be >= 1")
    shards = [Shard(i) for i in range(count)]
    heap = [(0, i) for i in range(count)]
    for entry in sorted(entries, key=lambda e: (-e.size, e.path)):
        load, i = heapq.heappop(heap)
        shards[i].paths.append(entry.path)
        shards[i].bytes += entry.size
        heapq.heappush(heap, (load + entry.size, i))
    for shard in shards:
        shard.paths.sort()
    return shards


def shard_file_name(index: int, count: int) -> str:
    return f"shard-{index:05d}-of-{count:05d}.txt"
