"""Run a command under strace and check, from the system calls it made, the durability
order `sync` promises (docs/sync.md, "How it copies"): every final name appears through a
rename of a temporary sibling whose data was written and fsynced (through the descriptor
that created it) before the rename, and every directory that received renames is fsynced
after the last of them.

The trace is `strace -f -yy -qq -s 0` output: one line per call, prefixed with the thread
id; a call interrupted by another thread's is split into "<unfinished ...>" and
"<... NAME resumed>" lines; -yy prints each descriptor with its path (`7</mnt/v/d/f>`);
-s 0 leaves data buffers out ("" ...) while paths stay whole."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

TRACED = ("openat", "open", "creat", "write", "pwrite64", "writev", "fsync", "fdatasync", "close",
          "rename", "renameat", "renameat2")

_LINE = re.compile(r"^(?P<tid>\d+)\s+(?P<rest>.*)$")
_RESUMED = re.compile(r"^<\.\.\. (?P<name>\w+) resumed>(?P<args>.*)$")
_CALL = re.compile(r"^(?P<name>\w+)\((?P<args>.*)$")
_FD = re.compile(r"(?:^|[\s(,])(?P<fd>\d+|AT_FDCWD)<(?P<path>(?:[^>\\]|\\.)*)>")
_STR = re.compile(r'"(?P<s>(?:[^"\\]|\\.)*)"')
_RESULT = re.compile(r"\)\s+= ")


@dataclass
class Syscall:
    tid: int
    name: str
    args: str  # the text between the parentheses
    result: str  # what follows "= ", e.g. "0", "3</mnt/v/x>", "-1 ENOENT (...)"
    start: int  # line of the call's entry: calls are ordered by the trace's lines
    end: int  # line of its return

    @property
    def ok(self) -> bool:
        return not self.result.startswith("-1") and self.result != "?"

    def fd_path(self) -> str | None:
        """The path of the first descriptor argument (fsync, write, close...)."""
        m = _FD.search(self.args)
        return _unescape(m.group("path")) if m else None

    def result_fd(self) -> tuple[int, str] | None:
        """openat / creat: the descriptor returned and the path it refers to."""
        m = re.match(r"^(\d+)<((?:[^>\\]|\\.)*)>", self.result)
        return (int(m.group(1)), _unescape(m.group(2))) if m else None

    def rename_paths(self) -> tuple[str, str] | None:
        """rename / renameat / renameat2: (old, new), made absolute with the directory
        descriptors' paths where they are relative."""
        strings = [_unescape(m.group("s")) for m in _STR.finditer(self.args)]
        if len(strings) < 2:
            return None
        old, new = strings[0], strings[1]
        if self.name != "rename":
            dirs = [_unescape(m.group("path")) for m in _FD.finditer(self.args)]
            if len(dirs) >= 2:
                old = old if old.startswith("/") else os.path.join(dirs[0], old)
                new = new if new.startswith("/") else os.path.join(dirs[1], new)
        return os.path.normpath(old), os.path.normpath(new)


def _unescape(text: str) -> str:
    """strace's C-style escapes (\\", \\\\, \\n, \\xNN...) back to the path's characters."""
    if "\\" not in text:
        return text
    raw = text.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1")
    return raw.decode("utf-8", "surrogateescape")


def parse(lines: Iterable[str]) -> list[Syscall]:
    """Calls in the trace, complete ones only (an unfinished call whose thread died is
    dropped), each with the line numbers of its entry and its return."""
    calls: list[Syscall] = []
    pending: dict[int, tuple[str, str, int]] = {}  # tid -> (name, args so far, entry line)
    for number, line in enumerate(lines):
        m = _LINE.match(line.rstrip("\n"))
        if not m:
            continue
        tid, rest = int(m.group("tid")), m.group("rest")
        if rest.startswith(("+++", "---")):  # exits and signals
            continue
        resumed = _RESUMED.match(rest)
        if resumed:
            if tid not in pending:
                continue
            name, head, entry = pending.pop(tid)
            tail = resumed.group("args")
        else:
            call = _CALL.match(rest)
            if not call:
                continue
            name, tail, entry = call.group("name"), call.group("args"), number
            head = ""
        if tail.endswith("<unfinished ...>"):
            pending[tid] = (name, head + tail[: -len("<unfinished ...>")].rstrip(), entry)
            continue
        # strace pads the result to a column: ")      = 0". The last ") = " is the
        # result's (data buffers are left out, paths never hold one... and if one did,
        # it would come earlier).
        ends = list(_RESULT.finditer(tail))
        if ends:
            args, result = head + tail[: ends[-1].start()], tail[ends[-1].end() :].strip()
        else:  # "= ?" of a call cut short by the thread's exit
            cut = tail.rfind(")")
            if cut < 0:
                continue
            args, result = head + tail[:cut], "?"
        calls.append(Syscall(tid, name, args.strip(), result, entry, number))
    return calls


def durability_problems(calls: Sequence[Syscall], root: str, finals: Iterable[str], *, dir_fsync: bool = True) -> list[str]:
    """What breaks the promised order for each final name (relative to `root`); empty
    when every one is durable. `dir_fsync=False` checks the files only (sync's own small
    files under .vpipe/ promise no directory fsync)."""
    root = os.path.normpath(root)
    renames: dict[str, Syscall] = {}
    for c in calls:
        if c.name.startswith("rename") and c.ok:
            paths = c.rename_paths()
            if paths:
                renames[paths[1]] = c  # the last rename onto a name is the one that counts
    problems: list[str] = []
    last_rename_into: dict[str, int] = {}
    for rel in sorted(finals):
        final = os.path.join(root, rel)
        rename = renames.get(final)
        if rename is None:
            problems.append(f"{rel}: no rename gave it its final name")
            continue
        tmp = rename.rename_paths()[0]  # type: ignore[index]
        if os.path.dirname(tmp) != os.path.dirname(final):
            problems.append(f"{rel}: renamed from another directory ({tmp})")
            continue
        problems.extend(f"{rel}: {p}" for p in _file_problems(calls, tmp, rename))
        parent = os.path.dirname(final)
        last_rename_into[parent] = max(last_rename_into.get(parent, -1), rename.end)
    if dir_fsync:
        for directory, last in sorted(last_rename_into.items()):
            if not any(
                c.name in ("fsync", "fdatasync") and c.ok and c.start > last and c.fd_path() == directory for c in calls
            ):
                problems.append(f"{directory}: no fsync of the directory after the renames into it")
    return problems


def _file_problems(calls: Sequence[Syscall], tmp: str, rename: Syscall) -> list[str]:
    """The temporary file `tmp`: created (O_CREAT|O_EXCL), written, fsynced through that
    same descriptor after its last write, and all of it before `rename` began."""
    opens = [c for c in calls if c.name in ("openat", "open", "creat") and c.ok and (c.result_fd() or (0, ""))[1] == tmp]
    creates = [c for c in opens if c.name == "creat" or "O_CREAT" in c.args]  # not a later read-back (--checksum)
    if not creates:
        return [f"temporary file {tmp} was never created"]
    created = creates[0]
    if "O_EXCL" not in created.args:
        return [f"temporary file {tmp} not created with O_CREAT|O_EXCL ({created.args})"]
    fd = created.result_fd()[0]  # type: ignore[index]
    closes = [c for c in calls if c.name == "close" and c.start > created.end and c.fd_path() == tmp and c.args.startswith(f"{fd}<")]
    closed_at = closes[0].start if closes else rename.start
    mine = [c for c in calls if created.end < c.start < closed_at and c.args.startswith(f"{fd}<") and c.fd_path() == tmp]
    writes = [c for c in mine if c.name in ("write", "pwrite64", "writev")]
    syncs = [c for c in mine if c.name in ("fsync", "fdatasync") and c.ok]
    if not syncs:
        return [f"temporary file {tmp} was never fsynced through descriptor {fd} before it was closed / renamed"]
    last_sync = syncs[-1]
    out = []
    if writes and max(w.end for w in writes) > last_sync.start:
        out.append(f"temporary file {tmp}: written after its fsync")
    if last_sync.end > rename.start:
        out.append(f"temporary file {tmp}: renamed before its fsync returned")
    later_writes = [c for c in calls if c.name in ("write", "pwrite64", "writev") and c.fd_path() == tmp and c.start > last_sync.end]
    if later_writes:
        out.append(f"temporary file {tmp}: written through another descriptor after the fsync")
    return out


def strace_binary() -> str | None:
    return shutil.which("strace")


def run_traced(cmd: Sequence[str], trace_file: str, *, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `cmd` under strace (threads followed), the trace written to `trace_file`."""
    strace = strace_binary()
    if strace is None:
        raise FileNotFoundError("strace")
    return subprocess.run(
        [strace, "-f", "-yy", "-qq", "-s", "0", "-e", "trace=" + ",".join(TRACED), "-o", trace_file, *cmd],
        capture_output=True, text=True, env=env, timeout=timeout,
    )
