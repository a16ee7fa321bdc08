"""The destination scan and its cache: a directory's listing is reused only while its
mtime is unchanged and was not racy when read. Runs on a local directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.trees import write_tree as _make
from tests.storage.trees import OLD_NS, age_dirs
from volcano_pipelines.transfer import dest
from volcano_pipelines.transfer.plan import Entry, temp_name




def _paths(listing: dest.DestListing) -> set[str]:
    return {e.path for e in listing.files}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "dst"
    _make(root, {"a": b"1", "d/b": b"22", "d/e/c": b"333", "f/x": b""})
    (root / ".vpipe").mkdir()
    (root / ".vpipe" / "lock").write_bytes(b"")
    age_dirs(root)
    return root


def _cached_scan(root: Path) -> dest.DestListing:
    return dest.scan(str(root), cache=dest.load_scan_cache(str(root)))


def _save(root: Path, listing: dest.DestListing) -> None:
    dest.save_scan_cache(str(root), dest.cacheable(listing))


def test_first_scan_reads_every_directory_and_skips_the_reserved_one(tree: Path) -> None:
    listing = dest.scan(str(tree))
    assert listing.reused == set() and set(listing.dirs) == {"", "d", "d/e", "f"}
    assert sorted(listing.files) == [Entry("a", 1, os.stat(tree / "a").st_mtime_ns // 10**6),
                                     Entry("d/b", 2, os.stat(tree / "d/b").st_mtime_ns // 10**6),
                                     Entry("d/e/c", 3, os.stat(tree / "d/e/c").st_mtime_ns // 10**6),
                                     Entry("f/x", 0, os.stat(tree / "f/x").st_mtime_ns // 10**6)]


def test_unchanged_directories_come_from_the_cache(tree: Path) -> None:
    first = dest.scan(str(tree))
    _save(tree, first)
    second = _cached_scan(tree)
    assert second.reused == {"", "d", "d/e", "f"}
    assert sorted(second.files) == sorted(first.files) and second.temps == first.temps == []


@pytest.mark.parametrize(
    "change, expect_read, expect_paths",
    [
        (lambda r: (r / "d/new").write_bytes(b"n"), {"d"}, {"a", "d/b", "d/new", "d/e/c", "f/x"}),
        (lambda r: (r / "d/e/c").unlink(), {"d/e"}, {"a", "d/b", "f/x"}),
        (lambda r: os.rename(r / "d/b", r / "d/b2"), {"d"}, {"a", "d/b2", "d/e/c", "f/x"}),
        (lambda r: os.rename(r / "d/b", r / "f/b"), {"d", "f"}, {"a", "f/b", "d/e/c", "f/x"}),
        (lambda r: (r / "g").mkdir(), {"", "g"}, {"a", "d/b", "d/e/c", "f/x"}),
    ],
    ids=["file added", "file deleted", "renamed in place", "moved across", "directory added"],
)
def test_a_changed_directory_is_read_again(tree: Path, change, expect_read: set[str], expect_paths: set[str]) -> None:  # type: ignore[no-untyped-def]
    _save(tree, dest.scan(str(tree)))
    change(tree)
    listing = _cached_scan(tree)
    assert set(listing.dirs) - listing.reused == expect_read
    assert _paths(listing) == expect_paths


def test_a_directory_replaced_by_a_symlink_is_listed_as_an_entry_not_followed(tree: Path, tmp_path: Path) -> None:
    _save(tree, dest.scan(str(tree)))
    outside = tmp_path / "outside"
    _make(outside, {"secret": b"s"})
    os.rename(tree / "f", tmp_path / "f-moved")
    os.symlink(outside, tree / "f")
    listing = _cached_scan(tree)
    assert ("f", -1, 0) in listing.dirs[""].files
    assert "f/secret" not in _paths(listing) and "f/x" not in _paths(listing)


def test_temporary_files_are_found_through_the_cache_too(tree: Path) -> None:
    _save(tree, dest.scan(str(tree)))
    leftover = temp_name("b", "00112233aabbccdd")
    (tree / "d" / leftover).write_bytes(b"partial")
    assert _cached_scan(tree).temps == [f"d/{leftover}"]


class _Clock:
    """The scan's wall clock (dest.time.time_ns), set by the test: whether a listing is
    racy depends on when it was read, and a test must not depend on how fast it runs."""

    def __init__(self, now_ns: int) -> None:
        self.now_ns = now_ns

    def time_ns(self) -> int:
        return self.now_ns


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock(0)
    monkeypatch.setattr(dest, "time", fake)
    return fake


def test_a_listing_read_right_after_a_change_is_racy_and_not_saved(tree: Path, clock: _Clock) -> None:
    (tree / "d/new").write_bytes(b"n")  # d's mtime is now: a change in the same tick could hide
    clock.now_ns = os.stat(tree / "d").st_mtime_ns + 1  # read right after that change
    listing = dest.scan(str(tree))
    saved = dest.cacheable(listing)
    assert "d" not in saved and {"", "d/e", "f"} <= set(saved)
    assert not listing.dirs["d"].reusable(listing.dirs["d"].mtime_ns)
    _save(tree, listing)
    assert "d" in _cached_scan(tree).dirs and "d" not in _cached_scan(tree).reused  # read again


@pytest.mark.parametrize("age_ns, racy", [(0, True), (dest.RACY_NS - 1, True), (dest.RACY_NS, False), (10 * dest.RACY_NS, False)])
def test_a_listing_is_racy_until_its_directory_is_racy_ns_old(tree: Path, clock: _Clock, age_ns: int, racy: bool) -> None:
    changed_ns = OLD_NS + 123_456_789
    os.utime(tree / "d", ns=(changed_ns, changed_ns))
    clock.now_ns = changed_ns + age_ns
    listing = dest.scan(str(tree))
    assert listing.dirs["d"].mtime_ns == changed_ns and listing.dirs["d"].scanned_ns == clock.now_ns
    assert listing.dirs["d"].racy is racy
    assert ("d" in dest.cacheable(listing)) is not racy
    _save(tree, listing)
    assert ("d" in _cached_scan(tree).reused) is not racy


def test_a_directory_whose_mtime_is_ahead_of_the_reader_is_racy(tree: Path, clock: _Clock) -> None:
    """A change from a client whose clock runs ahead of this one: never trusted."""
    ahead_ns = OLD_NS + 3600 * 10**9
    os.utime(tree / "d", ns=(ahead_ns, ahead_ns))
    clock.now_ns = ahead_ns - 1
    assert dest.scan(str(tree)).dirs["d"].racy


def test_an_in_place_edit_is_only_seen_by_a_full_scan(tree: Path) -> None:
    """The documented limit: the cache trusts directory mtimes, so a file rewritten in place
    (no create, rename or delete in its directory) keeps its cached size until a full scan."""
    _save(tree, dest.scan(str(tree)))
    with open(tree / "d/b", "ab") as fh:
        fh.write(b"more")
    cached = {e.path: e.size for e in _cached_scan(tree).files}
    full = {e.path: e.size for e in dest.scan(str(tree)).files}
    assert cached["d/b"] == 2 and full["d/b"] == 6


@pytest.mark.parametrize(
    "content",
    [b"not json", b'{"format": "other", "dirs": {}}', b'{"format": "vpipe-scan-cache/1", "dirs": {"": [1, 2]}}', b"[]"],
)
def test_an_unreadable_cache_means_a_full_scan(tree: Path, content: bytes) -> None:
    (tree / ".vpipe" / dest.SCAN_CACHE).write_bytes(content)
    assert dest.load_scan_cache(str(tree)) == {}
    assert dest.scan(str(tree), cache={}).reused == set()


def test_the_cache_file_is_replaced_whole(tree: Path) -> None:
    _save(tree, dest.scan(str(tree)))
    data = json.loads((tree / ".vpipe" / dest.SCAN_CACHE).read_bytes())
    assert data["format"] == "vpipe-scan-cache/1" and set(data["dirs"]) == {"", "d", "d/e", "f"}
    assert [n for n in os.listdir(tree / ".vpipe") if "vpipe-tmp" in n] == []


def test_fresh_dir_mtime_is_the_directory_mtime_and_none_for_anything_else(tree: Path, tmp_path: Path) -> None:
    assert dest.fresh_dir_mtime(str(tree / "d")) == os.lstat(tree / "d").st_mtime_ns == OLD_NS
    os.symlink(tree / "d", tmp_path / "link")
    assert dest.fresh_dir_mtime(str(tmp_path / "link")) is None  # not followed
    assert dest.fresh_dir_mtime(str(tree / "a")) is None
    with pytest.raises(FileNotFoundError):
        dest.fresh_dir_mtime(str(tree / "missing"))


def test_saving_the_cache_removes_a_temporary_file_an_interrupted_save_left(tree: Path) -> None:
    leftover = tree / ".vpipe" / temp_name(dest.SCAN_CACHE, "00112233aabbccdd")
    leftover.write_bytes(b"{partial")
    _save(tree, dest.scan(str(tree)))
    assert not leftover.exists() and dest.load_scan_cache(str(tree))


def test_a_subdirectory_gone_while_the_scan_runs_is_skipped(tree: Path) -> None:
    """The root's saved listing still names f/ (as if f/ vanished right after the root
    was read): the scan finds it gone and lists nothing for it, without failing."""
    _save(tree, dest.scan(str(tree)))
    for name in os.listdir(tree / "f"):
        os.unlink(tree / "f" / name)
    os.rmdir(tree / "f")
    os.utime(tree, ns=(OLD_NS, OLD_NS))  # the root's mtime as saved
    listing = _cached_scan(tree)
    assert "" in listing.reused and "f" not in listing.dirs
    assert _paths(listing) == {"a", "d/b", "d/e/c"}


def test_a_missing_root_scans_as_empty_and_a_file_root_fails(tmp_path: Path) -> None:
    assert dest.scan(str(tmp_path / "missing")).files == []
    (tmp_path / "file").write_bytes(b"x")
    assert dest.scan(str(tmp_path / "file")).files == []  # not a directory: sync refuses it earlier (InputError)
