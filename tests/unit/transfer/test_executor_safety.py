"""Regression tests for bugs that the rest of the suite let through (issue 14): each was
made by hand in a copy of the code, and these tests fail on it.

- a rejected source entry (symlink, hostile name) must stay protected from --delete;
- each file's data is fsynced before the rename that gives it its final name, and every
  directory that received renames is fsynced after them;
- "deleted" means unlinked;
- a source file that changes while it is being copied is copied again (both the
  stat-after-copy path and the one-read path with the re-listing).

All on local directories. The durability order is watched through a spy on os.utime (of a
descriptor: the last change to a temporary file), os.fsync, syncfs and os.replace that
records which file each call touched (from /proc/self/fd) and then makes the real call; it
runs for each --durability mode that promises anything (`batch` both ways: one syncfs on
this local file system, and the parallel fsync pass used where syncfs is not honoured);
tests/integration/test_sync_durability.py proves the same order with strace on a
GlusterFS mount."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.needs import unavailable
from tests.helpers.trees import write_tree as _tree
from tests.storage.trees import read_tree, temp_files
from volcano_pipelines.cli import main
from volcano_pipelines.steps._sync import sync
from volcano_pipelines.transfer import durability
from volcano_pipelines.transfer import executor as executor_mod
from volcano_pipelines.transfer.executor import Executor, Options
from volcano_pipelines.transfer.plan import RESERVED_DIR, Action, Entry, build_plan, is_temp_name
from volcano_pipelines.transfer.progress import Progress
from volcano_pipelines.transfer.sources import LocalSource




# ---------------------------------------------------------------------------- rejected entries vs --delete


def test_plan_never_deletes_the_destination_copy_of_a_rejected_source_entry() -> None:
    """The source still has these names (a symlink the listing refused, a name unsafe to
    write): they are not "gone from the source", so --delete must leave them alone."""
    source = [Entry("ok", 1, 1_000), Entry("bad\nname", 1, 1_000)]
    dest = [Entry("ok", 1, 1_000), Entry("bad\nname", 1, 1_000), Entry("link", 1, 1_000), Entry("gone", 1, 1_000)]
    plan = build_plan(source, dest, delete=True, rejected=[("link", "symbolic link (not followed)")])
    by_path = {(i.action, i.path) for i in plan.items}
    assert (Action.DELETE, "gone") in by_path  # --delete works at all
    assert {p for a, p in by_path if a is Action.DELETE} == {"gone"}
    assert {p for a, p in by_path if a is Action.REJECT} == {"bad\nname", "link"}


def test_plan_protects_a_rejected_entry_even_when_its_path_sorts_first() -> None:
    # Rejected entries come from a separate list; one that shadows a source file must not
    # let the file be planned twice either.
    plan = build_plan([Entry("a", 1, 1)], [Entry("a", 1, 1)], delete=True, rejected=[("a", "symbolic link")])
    assert [(i.action, i.path) for i in plan.items] == [(Action.REJECT, "a")]


def test_cli_sync_delete_keeps_the_destination_copy_of_a_source_symlink_and_a_hostile_name(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"data/keep.bin": b"k" * 10, "data/real.txt": b"real", "data/bad\nname": b"b"})
    _tree(dst, {"data/link.txt": b"the copy made before it became a symlink", "data/bad\nname": b"old", "data/stale": b"x"})
    os.symlink(src / "data" / "real.txt", src / "data" / "link.txt")

    code = main(["sync", str(src), str(dst), "--delete", "-q"])

    assert code == 1  # the two rejected entries are reported as failures
    tree = read_tree(dst)
    assert tree["data/link.txt"] == b"the copy made before it became a symlink"
    assert tree["data/bad\nname"] == b"old"
    assert "data/stale" not in tree  # --delete did run
    assert tree["data/keep.bin"] == b"k" * 10 and tree["data/real.txt"] == b"real"


# ---------------------------------------------------------------------------- durability order


@dataclass(frozen=True)
class Call:
    op: str  # "utime" | "fsync" | "syncfs" | "rename"
    path: str  # utime, fsync, syncfs: the file or directory the descriptor refers to; rename: the source
    target: str = ""  # rename: the new name
    is_dir: bool = False


class SyscallLog:
    """Records os.utime (of a descriptor), os.fsync, syncfs and os.replace calls (in call
    order, from every thread) and makes the real calls: each is recorded once it has
    happened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        real_fsync, real_replace, real_utime, real_syncfs = os.fsync, os.replace, os.utime, durability.syncfs

        def utime(target: object, *args: object, **kwargs: object) -> None:
            real_utime(target, *args, **kwargs)  # type: ignore[arg-type]
            if isinstance(target, int):
                with self._lock:
                    self.calls.append(Call("utime", os.readlink(f"/proc/self/fd/{target}")))

        def syncfs(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            real_syncfs(fd)
            with self._lock:
                self.calls.append(Call("syncfs", path))

        def fsync(fd: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
            real_fsync(fd)
            with self._lock:
                self.calls.append(Call("fsync", path, is_dir=is_dir))

        def replace(src: str, dst: str, **kwargs: object) -> None:
            real_replace(src, dst, **kwargs)  # type: ignore[arg-type]
            with self._lock:
                self.calls.append(Call("rename", os.path.abspath(src), os.path.abspath(dst)))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "utime", utime)
        monkeypatch.setattr(durability, "syncfs", syncfs)


def assert_durable_order(calls: list[Call], root: Path, finals: set[str]) -> None:
    """Every final name in `finals` (relative to root) was given by a rename of a
    temporary sibling whose data had been flushed - an fsync of it, or a syncfs of its
    file system - after its last change (the utime of its descriptor) and before the
    rename; each directory that received such renames was fsynced after the last of them."""
    renames = {c.target: (i, c) for i, c in enumerate(calls) if c.op == "rename"}
    changed = {c.path: i for i, c in enumerate(calls) if c.op == "utime"}
    syncfs_at = [i for i, c in enumerate(calls) if c.op == "syncfs"]
    fsynced_files: dict[str, int] = {}
    for i, c in enumerate(calls):
        if c.op == "fsync" and not c.is_dir and i > changed.get(c.path, -1):
            fsynced_files.setdefault(c.path, i)
    last_rename_into: dict[str, int] = {}
    for rel in sorted(finals):
        final = str(root / rel)
        assert final in renames, f"{rel}: no rename gave it its final name"
        index, call = renames[final]
        assert os.path.dirname(call.path) == os.path.dirname(final), f"{rel}: renamed from another directory"
        assert is_temp_name(os.path.basename(call.path)), f"{rel}: renamed from {call.path}, not a temporary file"
        if any(changed.get(call.path, -1) < i < index for i in syncfs_at):
            pass  # flushed with its whole file system
        else:
            assert call.path in fsynced_files, f"{rel}: its temporary file {call.path} was never fsynced"
            assert fsynced_files[call.path] < index, f"{rel}: fsynced only after the rename"
        parent = os.path.dirname(final)
        last_rename_into[parent] = max(last_rename_into.get(parent, -1), index)
    for directory, last in sorted(last_rename_into.items()):
        after = [i for i, c in enumerate(calls) if c.op == "fsync" and c.is_dir and c.path == directory and i > last]
        assert after, f"{directory}: not fsynced after the renames into it"


@pytest.fixture
def syscalls(monkeypatch: pytest.MonkeyPatch) -> SyscallLog:
    return SyscallLog(monkeypatch)


# (durability, whether the destination's file system may use syncfs)
PROMISING_MODES = [("file", True), ("batch", True), ("batch", False)]


@pytest.fixture(params=PROMISING_MODES, ids=["file", "batch-syncfs", "batch-fsync-pass"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name, may_syncfs = request.param
    if not may_syncfs:
        monkeypatch.setattr(executor_mod, "syncfs_honoured", lambda path: False)
    return name  # type: ignore[no-any-return]


def _data_files(root: Path) -> set[str]:
    return {rel for rel in read_tree(root) if not rel.startswith(RESERVED_DIR + "/")}


def test_every_file_is_fsynced_before_its_rename_and_every_directory_after(tmp_path: Path, syscalls: SyscallLog, mode: str) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    files = {"top.txt": b"t", "a/one": b"1" * 100, "a/b/two": b"2" * 5000, "c/big": os.urandom(3 << 20)}
    files.update({f"many/f{i:03d}": os.urandom(100) for i in range(60)})  # more files than transfers
    _tree(src, files)

    result = sync(str(src), str(dst), transfers=4, chunk_mib=1, durability=mode)  # c/big: several reads

    assert (result.copied, result.retried, result.failed) == (len(files), 0, 0) and read_tree(dst) == files
    assert_durable_order(syscalls.calls, dst, _data_files(dst))
    flushes = [c for c in syscalls.calls if c.op in ("fsync", "syncfs") and not c.is_dir]
    if mode == "file" or not executor_mod.syncfs_honoured(str(dst)):
        assert all(c.op == "fsync" for c in flushes) and len(flushes) >= len(files)
    else:  # batch on a local file system: whole batches flushed by syncfs, far fewer calls than files
        assert flushes and all(c.op == "syncfs" for c in flushes) and len(flushes) < len(files)


def test_durability_none_renames_whole_files_and_forces_nothing(tmp_path: Path, syscalls: SyscallLog) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    files = {"top.txt": b"t", "a/b/two": b"2" * 5000, "c/big": os.urandom(3 << 20)}
    _tree(src, files)

    result = sync(str(src), str(dst), transfers=4, chunk_mib=1, durability="none")

    assert (result.copied, result.failed) == (3, 0) and read_tree(dst) == files and temp_files(dst) == []
    renames = {c.target: c for c in syscalls.calls if c.op == "rename"}
    for rel in files:  # still atomic: each name appears by a rename of a whole temporary file
        assert is_temp_name(os.path.basename(renames[str(dst / rel)].path))
    data_flushes = [c for c in syscalls.calls if c.op in ("fsync", "syncfs") and RESERVED_DIR not in c.path]
    assert data_flushes == []


def test_durable_order_holds_for_replaced_files_and_with_checksum(tmp_path: Path, syscalls: SyscallLog, mode: str) -> None:
    """A re-sync that replaces existing names (a changed size, a same-size content change
    found by --checksum) keeps the order: the new data is fsynced before it replaces the
    old file."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"d/grow": b"short", "d/same": b"AAAA", "keep": b"k"})
    sync(str(src), str(dst))
    _tree(src, {"d/grow": b"longer now", "d/same": b"BBBB"})
    syscalls.calls.clear()

    result = sync(str(src), str(dst), checksum=True, durability=mode)

    assert result.copied == 2 and read_tree(dst) == read_tree(src)
    assert_durable_order(syscalls.calls, dst, {"d/grow", "d/same"})


def test_the_order_check_itself_catches_a_missing_fsync(tmp_path: Path) -> None:
    """The checker is not vacuous: a rename without an fsync of its file, or a directory
    never fsynced, is refused."""
    root = tmp_path
    tmp = str(root / "d" / ".f.vpipe-tmp-0011223344556677")
    final = str(root / "d" / "f")
    good = [Call("fsync", tmp), Call("rename", tmp, final), Call("fsync", str(root / "d"), is_dir=True)]
    assert_durable_order(good, root, {"d/f"})
    for broken in (good[1:], good[:2], [good[1], good[0], good[2]], [good[0], good[2], good[1]]):
        with pytest.raises(AssertionError):
            assert_durable_order(broken, root, {"d/f"})
    # A syncfs counts only after the file's last change and before its rename.
    changed = Call("utime", tmp)
    assert_durable_order([changed, Call("syncfs", str(root)), good[1], good[2]], root, {"d/f"})
    for broken in ([Call("syncfs", str(root)), changed, good[1], good[2]], [changed, good[1], Call("syncfs", str(root)), good[2]],
                   [good[0], changed, good[1], good[2]]):
        with pytest.raises(AssertionError):
            assert_durable_order(broken, root, {"d/f"})


# ---------------------------------------------------------------------------- deletes


def test_delete_really_unlinks_and_prunes_emptied_directories(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"keep/a": b"a"})
    _tree(dst, {"keep/a": b"a", "keep/gone": b"g", "old/deeper/x": b"x", "top": b"t"})

    result = sync(str(src), str(dst), delete=True, force_delete=True)  # the guard is tested elsewhere

    assert result.deleted == 3
    assert read_tree(dst) == {"keep/a": b"a"}
    assert not (dst / "old").exists()  # emptied directories go too
    assert (dst / "keep").is_dir()


def test_a_file_in_the_way_of_a_source_directory_is_really_removed(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"a/b": b"new"})
    _tree(dst, {"a": b"a file where the source has a directory"})

    result = sync(str(src), str(dst))

    assert (result.deleted, result.copied) == (1, 1) and read_tree(dst) == {"a/b": b"new"}


# ---------------------------------------------------------------------------- source changes during the copy


class _ChangeOnce(Progress):
    """Runs `change` once, from the transfer thread, after the first chunk of `path`."""

    def __init__(self, path: str, change) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.path = path
        self.change = change
        self.fired = False

    def advance(self, path: str, nbytes: int) -> None:
        super().advance(path, nbytes)
        if path == self.path and not self.fired:
            self.fired = True
            self.change()


NEW_MTIME_NS = 1_700_000_123_000_000_000  # a fixed, different mtime: no clock involved


def test_a_file_rewritten_in_place_during_a_multi_chunk_copy_is_copied_again(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    old, new = b"o" * (3 << 20), b"n" * (3 << 20)  # same size: only mtime and content move
    _tree(src, {"moving.bin": old, "still": b"s"})

    def rewrite() -> None:
        with open(src / "moving.bin", "r+b") as fh:
            fh.write(new)
        os.utime(src / "moving.bin", ns=(NEW_MTIME_NS, NEW_MTIME_NS))

    progress = _ChangeOnce("moving.bin", rewrite)
    result = sync(str(src), str(dst), transfers=1, chunk_mib=1, progress=progress)

    assert progress.fired
    assert (result.copied, result.retried, result.failed) == (2, 1, 0)
    assert result.bytes_copied == len(new) + 1  # the copy that was kept, and "still"
    assert (dst / "moving.bin").read_bytes() == new
    assert os.stat(dst / "moving.bin").st_mtime_ns == NEW_MTIME_NS
    assert temp_files(dst) == []


class _SnapshotLocalSource(LocalSource):
    """A local source read the way HDFS is: files are replaced (a new inode under the same
    name), never edited, so one read() of an open file is one consistent version - the
    executor then skips the per-file stat and relies on the re-listing after the pass."""

    snapshot_reads = True


def test_a_file_replaced_right_after_its_single_read_is_copied_again(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    # a-gone.txt is copied first (same size, sorts first) and deleted at the source
    # while small.txt is read: the re-listing must skip it and still look at the rest.
    _tree(src, {"a-gone.txt": b"gone version", "small.txt": b"old version\n", "other.txt": b"x"})

    def replace() -> None:
        fresh = src / ".small.txt.new"
        fresh.write_bytes(b"new version\n")  # same size: only the mtime tells
        os.utime(fresh, ns=(NEW_MTIME_NS, NEW_MTIME_NS))
        os.rename(fresh, src / "small.txt")
        os.unlink(src / "a-gone.txt")

    source = _SnapshotLocalSource(str(src))
    files, refused = source.list()
    plan = build_plan(files, [], rejected=refused)
    dst.mkdir()
    progress = _ChangeOnce("small.txt", replace)
    outcomes = {o.path: o for o in Executor(source, str(dst), Options(transfers=1), progress=progress.advance).run(plan)}

    assert progress.fired
    small = outcomes["small.txt"]
    assert (small.result, small.attempts, small.bytes, small.error) == ("copied", 2, 12, None)
    assert outcomes["other.txt"].attempts == 1
    assert (outcomes["a-gone.txt"].result, outcomes["a-gone.txt"].attempts) == ("copied", 1)
    assert (dst / "small.txt").read_bytes() == b"new version\n"
    assert (dst / "a-gone.txt").read_bytes() == b"gone version"  # the listed version, copied whole
    assert os.stat(dst / "small.txt").st_mtime_ns == NEW_MTIME_NS
    assert temp_files(dst) == []


# ---------------------------------------------------------------------------- retries (no real back-off: retry_delay=0)


class _FlakySource(LocalSource):
    """A local source whose open() of one file fails `failures` times first, with `error`."""

    def __init__(self, root: str, path: str, failures: int, error: Exception) -> None:
        super().__init__(root)
        self.path, self.failures, self.error = path, failures, error
        self.opens = 0

    def open(self, rel: str):  # type: ignore[no-untyped-def]
        if rel == self.path:
            self.opens += 1
            if self.opens <= self.failures:
                raise self.error
        return super().open(rel)


def _run_flaky(tmp_path: Path, failures: int, error: Exception, attempts: int = 4) -> tuple[dict, _FlakySource]:  # type: ignore[type-arg]
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"flaky.bin": b"f" * 1000, "fine.bin": b"ok"})
    dst.mkdir()
    source = _FlakySource(str(src), "flaky.bin", failures, error)
    files, refused = source.list()
    opts = Options(transfers=1, max_attempts=attempts, retry_delay=0.0)
    outcomes = {o.path: o for o in Executor(source, str(dst), opts).run(build_plan(files, [], rejected=refused))}
    return outcomes, source


def test_a_transient_source_error_is_retried_until_the_copy_succeeds(tmp_path: Path) -> None:
    outcomes, source = _run_flaky(tmp_path, 2, ConnectionResetError("connection reset by peer"))
    assert (outcomes["flaky.bin"].result, outcomes["flaky.bin"].attempts) == ("copied", 3)
    assert source.opens == 3 and (tmp_path / "dst/flaky.bin").read_bytes() == b"f" * 1000
    assert outcomes["fine.bin"].attempts == 1 and temp_files(tmp_path / "dst") == []


def test_a_transient_error_that_never_ends_fails_the_file_after_max_attempts(tmp_path: Path) -> None:
    outcomes, source = _run_flaky(tmp_path, 99, ConnectionResetError("connection reset by peer"), attempts=4)
    flaky = outcomes["flaky.bin"]
    assert (flaky.result, flaky.attempts, source.opens) == ("failed", 4, 4)
    assert flaky.error is not None and flaky.error.startswith("transient error: ConnectionResetError")
    assert not (tmp_path / "dst/flaky.bin").exists() and temp_files(tmp_path / "dst") == []
    assert outcomes["fine.bin"].result == "copied"


def test_a_permanent_source_error_is_not_retried(tmp_path: Path) -> None:
    outcomes, source = _run_flaky(tmp_path, 99, PermissionError(13, "Permission denied"))
    flaky = outcomes["flaky.bin"]
    assert (flaky.result, flaky.attempts, source.opens) == ("failed", 1, 1)
    assert flaky.error is not None and flaky.error.startswith("source error: PermissionError")


# ---------------------------------------------------------------------------- --checksum


def test_checksum_leaves_identical_content_in_place_and_only_fixes_the_mtime(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"same.bin": b"same content", "differs.bin": b"AAAA"})
    _tree(dst, {"same.bin": b"same content", "differs.bin": b"BBBB"})
    os.utime(src / "same.bin", ns=(NEW_MTIME_NS, NEW_MTIME_NS))
    inode = os.stat(dst / "same.bin").st_ino
    done: list[tuple[str, str]] = []

    class Record(Progress):
        def file_done(self, path: str, result: str) -> None:
            super().file_done(path, result)
            done.append((path, result))

    result = sync(str(src), str(dst), checksum=True, progress=Record())

    assert (result.copied, result.skipped) == (1, 1) and read_tree(dst) == read_tree(src)
    assert os.stat(dst / "same.bin").st_ino == inode  # not rewritten
    assert os.stat(dst / "same.bin").st_mtime_ns == NEW_MTIME_NS
    assert sorted(done) == [("differs.bin", "copied"), ("same.bin", "skipped")]


def test_the_second_attempt_copies_the_version_the_source_holds_then(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"moving.bin": b"o" * (256 << 10)})

    def rewrite() -> None:
        with open(src / "moving.bin", "r+b") as fh:
            fh.write(b"n" * (256 << 10))
        os.utime(src / "moving.bin", ns=(NEW_MTIME_NS, NEW_MTIME_NS))

    source = LocalSource(str(src))
    files, _ = source.list()
    dst.mkdir()
    progress = _ChangeOnce("moving.bin", rewrite)
    [outcome] = Executor(source, str(dst), Options(transfers=1, chunk_size=64 << 10), progress=progress.advance).run(build_plan(files, []))

    assert (outcome.result, outcome.attempts, outcome.bytes) == ("copied", 2, 256 << 10)
    assert os.stat(dst / "moving.bin").st_mtime_ns == NEW_MTIME_NS


# ---------------------------------------------------------------------------- the destination changed behind the plan


def _execute(src: Path, dst: Path, items: list) -> dict:  # type: ignore[type-arg]
    """Run a hand-made plan: the destination changed after it was scanned."""
    from volcano_pipelines.transfer.plan import Plan

    plan = Plan(items=tuple(items), selected=())
    return {o.path: o for o in Executor(LocalSource(str(src)), str(dst), Options(transfers=2, retry_delay=0.0)).run(plan)}


def test_a_symlink_that_appeared_where_a_directory_is_needed_is_not_written_through(tmp_path: Path) -> None:
    from volcano_pipelines.transfer.plan import PlanItem

    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    _tree(src, {"d/x": b"data", "d/e/y": b"more", "ok": b"fine"})
    outside.mkdir()
    dst.mkdir()
    os.symlink(outside, dst / "d")
    mtime = os.stat(src / "d/x").st_mtime_ns // 1_000_000
    items = [PlanItem(Action.COPY, rel, "new", len((src / rel).read_bytes()), os.stat(src / rel).st_mtime_ns // 1_000_000)
             for rel in ("d/x", "d/e/y", "ok")]
    assert items[0].mtime_ms == mtime

    outcomes = _execute(src, dst, items)

    assert list(outside.iterdir()) == []
    for rel in ("d/x", "d/e/y"):
        assert outcomes[rel].result == "failed" and outcomes[rel].error is not None
        assert outcomes[rel].error.startswith("unsafe destination: d is a symbolic link")
    assert outcomes["ok"].result == "copied" and (dst / "ok").read_bytes() == b"fine"


def test_deletes_never_go_through_a_symlinked_parent_or_remove_a_directory(tmp_path: Path) -> None:
    from volcano_pipelines.transfer.plan import PlanItem

    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    src.mkdir()
    _tree(outside, {"x": b"not ours"})
    _tree(dst, {"sub/inner": b"i", "gone": b"g"})
    os.symlink(outside, dst / "link")

    outcomes = _execute(src, dst, [PlanItem(Action.DELETE, p, "not in source") for p in ("link/x", "sub", "gone")])

    assert (outcomes["link/x"].result, outcomes["link/x"].error) == ("failed", "not removed: a parent is not a real directory")
    assert (outcomes["sub"].result, outcomes["sub"].error) == ("failed", "not removed: is a directory")
    assert outcomes["gone"].result == "deleted" and not (dst / "gone").exists()
    assert (outside / "x").read_bytes() == b"not ours" and (dst / "sub/inner").exists()


def test_compare_against_a_destination_file_that_vanished_copies_it(tmp_path: Path) -> None:
    from volcano_pipelines.transfer.plan import PlanItem

    src, dst = tmp_path / "src", tmp_path / "dst"
    _tree(src, {"f": b"content"})
    dst.mkdir()
    item = PlanItem(Action.COMPARE, "f", "same size: compare content", 7, os.stat(src / "f").st_mtime_ns // 1_000_000)

    outcomes = _execute(src, dst, [item])

    assert outcomes["f"].result == "copied" and (dst / "f").read_bytes() == b"content"


# ---------------------------------------------------------------------------- a destination that fills up (tmpfs)


@pytest.fixture
def tiny_volume(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 1 MiB tmpfs: writes really fail with ENOSPC. Needs root (mount)."""
    import subprocess

    if os.geteuid() != 0:
        unavailable("needs root to mount a tmpfs")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode != 0:
        unavailable("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_destination_stops_the_sync_cleanly(tmp_path: Path, tiny_volume: Path) -> None:
    from volcano_pipelines.steps._sync import SyncFailed

    src = tmp_path / "src"
    files = {f"part{i}.bin": os.urandom(400 << 10) for i in range(6)}  # 2.4 MiB into 1 MiB
    _tree(src, files)
    dst = tiny_volume / "data"

    with pytest.raises(SyncFailed) as info:
        sync(str(src), str(dst), transfers=2, chunk_mib=1)

    err = info.value
    assert err.exit_code == 1 and str(err).startswith("destination full")  # the cause, not a per-file list
    assert err.result.failed >= 1 and err.result.copied + err.result.failed == len(files)
    errors = [f["error"] for f in err.result.failures]
    assert any(e.startswith("destination full") for e in errors)
    # The rest stop: what was still queued is not attempted (2 threads, at most 2 files fit).
    assert any(e.startswith("not attempted: destination full") for e in errors), errors
    tree = read_tree(dst)
    assert 0 < len(tree) < len(files)
    assert {f["path"] for f in err.result.failures} | set(tree) == set(files)
    for rel, data in tree.items():  # whatever has a final name is complete
        assert data == files[rel], rel
    assert temp_files(dst) == []


class _BreaksMidFile(LocalSource):
    """A local source whose first read of one file delivers `good` bytes, then the connection
    drops (ConnectionResetError): the retry reads it whole."""

    def __init__(self, root: str, path: str, good: int) -> None:
        super().__init__(root)
        self.path, self.good, self.opens = path, good, 0

    def open(self, rel: str):  # type: ignore[no-untyped-def]
        handle = super().open(rel)
        if rel != self.path:
            return handle
        self.opens += 1
        if self.opens > 1:
            return handle
        good = self.good

        class _Half:
            def read(self, n: int = -1) -> bytes:
                nonlocal good
                if good <= 0:
                    raise ConnectionResetError("connection reset by peer")
                data = handle.read(min(n, good) if n and n > 0 else good)
                good -= len(data)
                return data

            def close(self) -> None:
                handle.close()

            def __enter__(self):  # type: ignore[no-untyped-def]
                return self

            def __exit__(self, *exc: object) -> None:
                self.close()

        return _Half()


@pytest.mark.parametrize("size", [300_000, 3 << 20], ids=["small", "ranged"])
def test_progress_of_a_retried_file_counts_its_bytes_once(tmp_path: Path, size: int) -> None:
    """Issue 33, item 13: progress showed 200.7 % after a retried file (both attempts' bytes)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    data = os.urandom(size)
    _tree(src, {"big.bin": data, "small.bin": b"ok"})
    dst.mkdir()
    source = _BreaksMidFile(str(src), "big.bin", good=size // 3)
    files, refused = source.list()
    reported: dict[str, int] = {}
    opts = Options(transfers=1, max_attempts=3, retry_delay=0.0, chunk_size=1 << 20)
    executor = Executor(source, str(dst), opts,
                        progress=lambda path, n: reported.__setitem__(path, reported.get(path, 0) + n))
    outcomes = {o.path: o for o in executor.run(build_plan(files, [], rejected=refused))}
    assert (outcomes["big.bin"].result, outcomes["big.bin"].attempts) == ("copied", 2)
    assert source.opens >= 2 and (dst / "big.bin").read_bytes() == data
    assert reported["big.bin"] == size and reported.get("small.bin") == 2


@pytest.mark.parametrize("corrupt_attempts", [1, 99], ids=["once", "always"])
def test_checksum_read_back_compares_what_is_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     corrupt_attempts: int) -> None:
    """Issue 33: `--checksum` verifies by reading the written file back. A byte flipped on disk
    between the write and that read (storage corruption) must fail the attempt: retried, then
    copied intact, or failed with no final file - never a corrupt file under its name."""
    from volcano_pipelines.transfer import executor as executor_mod

    src, dst = tmp_path / "src", tmp_path / "dst"
    data = os.urandom(200_000)
    _tree(src, {"data.bin": data})
    dst.mkdir()
    real_hash = executor_mod.hash_file
    corrupted: list[str] = []

    def corrupt_then_hash(path: str, chunk: int) -> str:
        if len(corrupted) < corrupt_attempts and ".vpipe-tmp-" in path:
            with open(path, "r+b") as f:  # one byte flipped in the written file itself
                f.seek(1000)
                byte = f.read(1)
                f.seek(1000)
                f.write(bytes([byte[0] ^ 0xFF]))
            corrupted.append(path)
        return real_hash(path, chunk)

    monkeypatch.setattr(executor_mod, "hash_file", corrupt_then_hash)
    source = LocalSource(str(src))
    files, refused = source.list()
    opts = Options(transfers=1, max_attempts=3, retry_delay=0.0, checksum=True)
    [outcome] = Executor(source, str(dst), opts).run(build_plan(files, [], rejected=refused))
    assert corrupted
    if corrupt_attempts == 1:
        assert (outcome.result, outcome.attempts) == ("copied", 2)
        assert (dst / "data.bin").read_bytes() == data
    else:
        assert outcome.result == "failed" and outcome.error is not None and "sha256" in outcome.error
        assert not (dst / "data.bin").exists()
    assert temp_files(dst) == []
