"""The whole step on local directories (file:// source): atomicity, safety, reports."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.trees import write_tree as _tree
from tests.storage.trees import age_dirs, read_tree, temp_files
from volcano_pipelines.cli import main
from volcano_pipelines.errors import InputError
from volcano_pipelines.steps._sync import SyncFailed, sync
from volcano_pipelines.transfer.plan import temp_name




@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    _tree(root, {"a.txt": b"a", "d/b.bin": os.urandom(5000), "d/e/c": b""})
    return root


def test_local_sync_round_trip(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    first = sync(str(src), str(dst), shards=2)
    assert first.copied == 3 and read_tree(dst) == read_tree(src)
    assert os.stat(dst / "d/b.bin").st_mtime_ns // 1_000_000 == os.stat(src / "d/b.bin").st_mtime_ns // 1_000_000
    assert sync(f"file://{src}", str(dst)).skipped == 3


def test_leftover_temp_files_are_cleaned(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    (dst / "d").mkdir(parents=True)
    leftover = dst / "d" / temp_name("b.bin", "00112233aabbccdd")
    leftover.write_bytes(b"partial")
    result = sync(str(src), str(dst))
    assert result.cleaned == 1 and temp_files(dst) == [] and read_tree(dst) == read_tree(src)


def test_source_symlinks_are_rejected_not_followed(src: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("do not copy")
    os.symlink(secret, src / "link.txt")
    dst = tmp_path / "dst"
    with pytest.raises(SyncFailed) as info:
        sync(str(src), str(dst))
    assert info.value.result.failures[0]["path"] == "link.txt"
    assert not (dst / "link.txt").exists() and read_tree(dst) == {k: v for k, v in read_tree(src).items() if k != "link.txt"}


def test_destination_symlink_dir_is_not_followed(src: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dst = tmp_path / "dst"
    dst.mkdir()
    os.symlink(outside, dst / "d")
    sync(str(src), str(dst))
    assert list(outside.iterdir()) == [] and (dst / "d").is_dir() and not (dst / "d").is_symlink()


def test_dry_run_changes_nothing(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    result = sync(str(src), str(dst), dry_run=True, delete=True)
    assert result.copied == 3 and not dst.exists()
    assert {i["path"] for i in result.plan} == {"a.txt", "d/b.bin", "d/e/c"}


@pytest.mark.parametrize(
    "kwargs,field",
    [({"transfers": 0}, "transfers"), ({"shards": -1}, "shards"), ({"include": [""]}, "include"),
     ({"kerberos_keytab": "/nope"}, "kerberos_keytab")],
)
def test_bad_arguments(src: Path, tmp_path: Path, kwargs: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InputError) as info:
        sync(str(src), str(tmp_path / "dst"), **kwargs)
    assert info.value.field == field
    assert not (tmp_path / "dst").exists()


def test_missing_source_and_destination_inside_source(src: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError):
        sync(str(tmp_path / "nope"), str(tmp_path / "dst"))
    with pytest.raises(InputError):
        sync(str(src), str(src / "inner"))


def test_read_only_destination_is_a_permission_problem(src: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root for a read-only bind mount")
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.system(f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro}") != 0:
        pytest.skip("cannot make a read-only bind mount here")
    try:
        assert main(["sync", str(src), str(ro), "-q"]) == 3
    finally:
        os.system(f"umount {ro}")


def test_cli_exit_codes(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sync", str(src), str(tmp_path / "dst"), "--json", "-q"]) == 0
    assert '"copied": 3' in capsys.readouterr().out
    assert main(["sync", str(tmp_path / "missing"), str(tmp_path / "dst"), "-q"]) == 2
    assert main(["sync", str(src), str(tmp_path / "dst"), "--transfers", "0"]) == 2


# ---------------------------------------------------------------------------- scan cache


def test_a_noop_resync_reads_no_directory_once_the_cache_is_saved(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    sync(str(src), str(dst))
    age_dirs(dst)
    warm = sync(str(src), str(dst))
    assert (warm.dest_dirs_read, warm.dest_dirs_cached, warm.skipped) == (3, 0, 3)
    mtime = os.stat(dst / ".vpipe" / "scan-cache.json").st_mtime_ns
    cached = sync(str(src), str(dst))
    assert (cached.dest_dirs_read, cached.dest_dirs_cached, cached.skipped, cached.copied) == (0, 3, 3, 0)
    # Nothing new was read, so nothing was written.
    assert os.stat(dst / ".vpipe" / "scan-cache.json").st_mtime_ns == mtime


def test_a_file_removed_behind_the_cache_is_copied_again(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    sync(str(src), str(dst))
    age_dirs(dst)
    sync(str(src), str(dst))
    (dst / "d/b.bin").unlink()
    result = sync(str(src), str(dst))
    assert result.copied == 1 and result.dest_dirs_read == 1 and read_tree(dst) == read_tree(src)


def test_full_scan_finds_a_file_edited_in_place_that_the_cache_cannot(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    sync(str(src), str(dst))
    age_dirs(dst)
    sync(str(src), str(dst))
    with open(dst / "d/b.bin", "r+b") as fh:
        fh.write(b"garbage")  # same size, new mtime, no change to the directory
    assert sync(str(src), str(dst)).copied == 0  # the documented limit of the cache
    assert sync(str(src), str(dst), full_scan=True).copied == 1
    assert read_tree(dst) == read_tree(src)


def test_dry_run_writes_no_scan_cache(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    dst.mkdir()
    sync(str(src), str(dst), dry_run=True)
    assert not (dst / ".vpipe").exists()


def test_cli_full_scan_flag(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    dst = tmp_path / "dst"
    sync(str(src), str(dst))
    age_dirs(dst)
    sync(str(src), str(dst))
    assert main(["sync", "-q", "--json", "--full-scan", str(src), str(dst)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["dest_dirs_read"], out["dest_dirs_cached"], out["skipped"]) == (3, 0, 3)


def test_shard_manifests_replace_old_ones_and_leftover_temporary_files(src: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    sync(str(src), str(dst), shards=3)
    shards_dir = dst / ".vpipe" / "shards"
    leftover = shards_dir / temp_name("index.json", "00112233aabbccdd")
    leftover.write_bytes(b"{")
    result = sync(str(src), str(dst), shards=2)
    assert sorted(os.listdir(shards_dir)) == ["index.json", "shard-00000-of-00002.txt", "shard-00001-of-00002.txt"]
    assert [Path(p).name for p in result.shard_manifests] == ["shard-00000-of-00002.txt", "shard-00001-of-00002.txt"]


def test_cli_says_what_it_listed_and_plans_before_copying(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dst = tmp_path / "dst"
    assert main(["sync", str(src), str(dst)]) == 0
    err = capsys.readouterr().err
    assert "listed 3 source files and the destination (0 directories read, 0 from the scan cache)" in err
    assert "plan: copy 3 (0.0 MB), skip 0, delete 0, clean 0, reject 0" in err
    assert main(["sync", "-q", str(src), str(dst)]) == 0
    assert "listed" not in capsys.readouterr().err
