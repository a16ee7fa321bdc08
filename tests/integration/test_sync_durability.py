"""Durability, proven from the system calls of a real `vpipe sync` onto a GlusterFS mount
(strace -f): the order docs/sync.md promises ("How it copies") -

- every final name appears by a rename of a temporary sibling that was created with
  O_CREAT|O_EXCL, written, and fsynced through that descriptor after its last write and
  before the rename;
- every directory that received renames is fsynced after the last of them;
- sync's own manifests (.vpipe/shards/) are written the same way (temporary file fsynced
  before its rename; no directory fsync is promised for them).

Each --durability mode that promises this (`file`: every transfer thread fsyncs its own
file; `batch`: a committer flushes the files handed over meanwhile - on GlusterFS, whose
FUSE client does not pass syncfs on, with a parallel pass of fsyncs through the
descriptors that wrote them - and then renames them) is traced along each path that
writes a file differently: a first copy (files read in one piece and in several chunks,
nested directories), and a re-sync with --checksum that replaces existing names (a size
change, and a same-size content change only the checksum finds). `none` promises only
the rename of a whole temporary file, and that it forces nothing: traced too."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers.trees import write_tree as _tree
from tests.needs import unavailable
from tests.storage.strace import durability_problems, parse, run_traced, strace_binary
from tests.storage.trees import read_tree, temp_files
from volcano_pipelines.transfer.plan import RESERVED_DIR

pytestmark = [pytest.mark.gluster, pytest.mark.timeout(600)]




def _traced_sync(tmp_path: Path, name: str, *args: str) -> list:  # type: ignore[type-arg]
    if strace_binary() is None:
        unavailable("strace not installed (tests/storage/ci_prepare.sh installs it)")
    trace = tmp_path / f"{name}.strace"
    cmd = [sys.executable, "-m", "volcano_pipelines", "sync", *args, "-q"]
    proc = run_traced(cmd, str(trace))
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-2000:]}"
    with open(trace, errors="replace") as fh:
        return parse(fh)


def _renames_into(calls: list, root: Path) -> int:  # type: ignore[type-arg]
    prefix = str(root) + "/"
    return sum(1 for c in calls if c.name.startswith("rename") and c.ok and (c.rename_paths() or ("", ""))[1].startswith(prefix))


MODES = ["file", "batch"]


@pytest.mark.parametrize("mode", MODES)
def test_every_file_reaches_its_final_name_durably(gluster, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    src, dst = tmp_path / "src", gluster.fresh_dir("durable")
    files = {
        "top.txt": b"top\n",
        "a/one.bin": os.urandom(10_000),
        "a/b/two.bin": os.urandom(70_000),
        "a/b/c/three.bin": b"",
        "big/multi.bin": os.urandom(3 << 20),  # three reads of --chunk-mib 1
    }
    _tree(src, files)

    calls = _traced_sync(tmp_path, "first", str(src), str(dst), "--chunk-mib", "1", "--transfers", "4", "--shards", "2",
                         "--durability", mode)

    assert read_tree(dst) == files and temp_files(dst) == []
    assert len(calls) > 50 and _renames_into(calls, dst) >= len(files)  # the trace saw the work
    assert durability_problems(calls, str(dst), files) == []
    manifests = {f"{RESERVED_DIR}/shards/{n}" for n in os.listdir(dst / RESERVED_DIR / "shards")}
    assert len(manifests) == 3  # two shards + index.json
    assert durability_problems(calls, str(dst), manifests, dir_fsync=False) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_resync_that_replaces_files_keeps_the_order(gluster, tmp_path: Path, mode: str) -> None:  # type: ignore[no-untyped-def]
    src, dst = tmp_path / "src", gluster.fresh_dir("durable-re")
    _tree(src, {"d/grow.bin": b"short", "d/same.bin": b"AAAA", "d/e/keep.bin": b"k", "top": b"t"})
    _traced_sync(tmp_path, "seed", str(src), str(dst))
    _tree(src, {"d/grow.bin": b"longer than before", "d/same.bin": b"BBBB", "d/e/new.bin": b"n"})
    # Same size and (to the millisecond) the old mtime: only --checksum sees the change.
    before = os.stat(dst / "d/same.bin").st_mtime_ns
    os.utime(src / "d/same.bin", ns=(before, before))
    replaced = {"d/grow.bin", "d/same.bin", "d/e/new.bin"}

    calls = _traced_sync(tmp_path, "resync", str(src), str(dst), "--checksum", "--durability", mode)

    assert read_tree(dst) == read_tree(src) and temp_files(dst) == []
    assert _renames_into(calls, dst) >= len(replaced)
    assert durability_problems(calls, str(dst), replaced) == []


def test_durability_none_still_renames_whole_files_and_forces_nothing(gluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src, dst = tmp_path / "src", gluster.fresh_dir("durable-none")
    files = {"top.txt": b"top\n", "a/one.bin": os.urandom(10_000), "big/multi.bin": os.urandom(3 << 20)}
    _tree(src, files)

    calls = _traced_sync(tmp_path, "none", str(src), str(dst), "--chunk-mib", "1", "--durability", "none")

    assert read_tree(dst) == files and temp_files(dst) == []
    problems = durability_problems(calls, str(dst), files)
    # Every final name still comes from a rename of a created temporary file; only the
    # fsyncs are missing (file and directory ones alike).
    assert problems and all("never fsynced" in p or "no fsync of the directory" in p for p in problems), problems
    prefix = str(dst) + "/"
    data_fsyncs = [c for c in calls if c.name in ("fsync", "fdatasync") and (c.fd_path() or "").startswith(prefix)
                   and RESERVED_DIR not in (c.fd_path() or "")]
    assert data_fsyncs == []
