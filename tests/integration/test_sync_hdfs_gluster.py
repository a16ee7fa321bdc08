"""`sync` against a real HDFS (MiniDFSCluster) into a real GlusterFS volume (FUSE mount)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.storage.harness import free_port
from tests.storage.trees import age_dirs, hdfs_mtimes, put_tree, read_tree, temp_files
from volcano_pipelines.errors import ClusterError, InputError
from volcano_pipelines.steps._sync import SyncFailed, sync

pytestmark = [pytest.mark.hdfs, pytest.mark.gluster, pytest.mark.timeout(300)]


def _files(n: int = 12, size: int = 3000) -> dict[str, bytes]:
    out = {f"part/{i // 5}/f{i:03d}.bin": os.urandom(size + i) for i in range(n)}
    out["top.txt"] = b"hello\n"
    out["big.bin"] = os.urandom(3 << 20)
    return out


@pytest.fixture
def src(hdfs):  # type: ignore[no-untyped-def]
    root = f"/data/{uuid.uuid4().hex[:8]}"
    return hdfs.client(), root, f"{hdfs.url}{root}"


def test_first_sync_copies_everything_and_preserves_mtime(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    files = _files()
    put_tree(client, root, files)
    dst = gluster.fresh_dir("first")

    result = sync(url, str(dst))

    assert result.copied == len(files) and result.failed == 0 and result.skipped == 0
    assert result.bytes_copied == sum(len(b) for b in files.values())
    assert read_tree(dst) == files
    mtimes = hdfs_mtimes(client, root)
    for rel, ms in mtimes.items():
        assert os.stat(dst / rel).st_mtime_ns == ms * 1_000_000, rel
    assert temp_files(dst) == []


def test_resync_is_a_noop(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    files = _files()
    put_tree(client, root, files)
    dst = gluster.fresh_dir("noop")
    sync(url, str(dst))
    before = {rel: os.stat(dst / rel).st_ino for rel in files}

    again = sync(url, str(dst))

    assert (again.copied, again.skipped, again.deleted, again.failed) == (0, len(files), 0, 0)
    assert {rel: os.stat(dst / rel).st_ino for rel in files} == before  # nothing rewritten


def test_noop_resync_reuses_listings_and_sees_a_delete_by_another_client(hdfs, gluster, src, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    files = _files()
    put_tree(client, root, files)
    dst = gluster.fresh_dir("cache")
    sync(url, str(dst))
    age_dirs(dst)
    dirs = 1 + len({os.path.dirname(p) for p in files} - {""}) + 1  # root, part/0..2, part
    assert sync(url, str(dst)).dest_dirs_read == dirs
    cached = sync(url, str(dst))
    assert (cached.dest_dirs_read, cached.dest_dirs_cached, cached.skipped) == (0, dirs, len(files))

    # Another client (a second FUSE mount of the same volume, as a pod on another node).
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["mount", "-t", "glusterfs", f"{socket.gethostname()}:/{gluster.volume.name}", str(other)], check=True)
    try:
        (other / dst.name / "part/1/f005.bin").unlink()
        (other / dst.name / "part/2/extra").write_bytes(b"x")
    finally:
        subprocess.run(["umount", "-l", str(other)], check=False)
    # No wait: this client's kernel still holds the directories' old attributes (the FUSE
    # attribute timeout is 1 s); the scan asks GlusterFS itself (statx, AT_STATX_FORCE_SYNC).
    after = sync(url, str(dst), delete=True)
    assert (after.copied, after.deleted, after.dest_dirs_read) == (1, 1, 2)
    assert read_tree(dst) == files


def test_changed_added_deleted_and_delete_flag(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    files = _files()
    put_tree(client, root, files)
    dst = gluster.fresh_dir("changes")
    sync(url, str(dst))

    files["top.txt"] = b"hello, longer now\n"  # size changes
    files["part/0/f000.bin"] = os.urandom(3000)  # same size, new mtime
    files["new/added.txt"] = b"added"
    put_tree(client, root, {k: files[k] for k in ("top.txt", "part/0/f000.bin", "new/added.txt")})
    client.delete(f"{root}/part/0/f001.bin")
    gone = files.pop("part/0/f001.bin")

    kept = sync(url, str(dst))
    assert (kept.copied, kept.deleted, kept.failed) == (3, 0, 0)
    tree = read_tree(dst)
    assert tree["part/0/f001.bin"] == gone  # without --delete extraneous files stay
    del tree["part/0/f001.bin"]
    assert tree == files

    pruned = sync(url, str(dst), delete=True)
    assert (pruned.copied, pruned.deleted) == (0, 1)
    assert read_tree(dst) == files


def test_checksum_finds_same_size_same_mtime_difference(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    files = _files(n=4)
    put_tree(client, root, files)
    dst = gluster.fresh_dir("checksum")
    sync(url, str(dst))
    victim = dst / "part/0/f002.bin"
    st = victim.stat()
    victim.write_bytes(os.urandom(st.st_size))  # silent corruption: same size...
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # ...and same mtime

    assert sync(url, str(dst)).copied == 0  # size + mtime cannot see it (documented)
    fixed = sync(url, str(dst), checksum=True)
    assert (fixed.copied, fixed.skipped, fixed.failed) == (1, len(files) - 1, 0)
    assert read_tree(dst) == files
    assert sync(url, str(dst), checksum=True).copied == 0


def test_include_exclude_and_dry_run(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    files = _files()
    put_tree(client, root, files)
    dst = gluster.fresh_dir("filters")

    plan = sync(url, str(dst), include=["part/**"], exclude=["*7.bin"], dry_run=True)
    assert list(dst.iterdir()) == []  # dry run writes nothing, not even .vpipe/
    wanted = {k for k in files if k.startswith("part/") and not k.endswith("7.bin")}
    assert {i["path"] for i in plan.plan if i["action"] == "copy"} == wanted

    result = sync(url, str(dst), include=["part/**"], exclude=["*7.bin"])
    assert set(read_tree(dst)) == wanted and result.copied == len(wanted)


def test_shards_are_balanced_by_bytes_and_cover_every_file(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    files = {f"s/{i:02d}.bin": os.urandom(1000 * (i + 1)) for i in range(20)}
    put_tree(client, root, files)
    dst = gluster.fresh_dir("shards")

    result = sync(url, str(dst), shards=3)

    assert len(result.shard_manifests) == 3
    seen: list[str] = []
    loads = []
    for i, path in enumerate(result.shard_manifests):
        assert path.endswith(f"shard-{i:05d}-of-00003.txt")
        names = Path(path).read_text().splitlines()
        seen += names
        loads.append(sum(len(files[n]) for n in names))
    assert sorted(seen) == sorted(files)
    assert max(loads) - min(loads) <= max(len(b) for b in files.values())
    index = json.loads((dst / ".vpipe/shards/index.json").read_text())
    assert [s["bytes"] for s in index["shards"]] == loads


def test_webhdfs_source_with_simple_auth_user(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, _ = src
    files = _files(n=3)
    put_tree(client, root, files)
    dst = gluster.fresh_dir("webhdfs")

    result = sync(f"{hdfs.webhdfs_url}{root}", str(dst), user="alice")

    assert result.copied == len(files) and read_tree(dst) == files
    assert "ugi=alice" in hdfs.audit_log()  # the NameNode saw the user we passed


def test_hdfs_simple_auth_user_is_passed_through(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    put_tree(client, root, {"a.txt": b"a"})
    dst = gluster.fresh_dir("user")
    sync(url, str(dst), user="bob")
    assert "ugi=bob" in hdfs.audit_log() and f"src={root}/a.txt" in hdfs.audit_log()


def test_cli_json_and_exit_codes(hdfs, gluster, src) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    put_tree(client, root, {"x/y.txt": b"yy"})
    dst = gluster.fresh_dir("cli")
    vpipe = [sys.executable, "-m", "volcano_pipelines", "sync"]

    ok = subprocess.run([*vpipe, url, str(dst), "--json"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["copied"] == 1

    missing = subprocess.run([*vpipe, f"{hdfs.url}/no/such/dir", str(dst)], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "does not exist" in missing.stderr

    port = free_port()
    down = subprocess.run([*vpipe, f"hdfs://127.0.0.1:{port}/data", str(dst)], capture_output=True, text=True, timeout=60)
    assert down.returncode == 3
    assert f"127.0.0.1:{port}" in down.stderr and "NameNode" in down.stderr


def test_errors_are_typed() -> None:
    with pytest.raises(InputError):
        sync("ftp2://x/y", "/tmp/x")
    with pytest.raises(ClusterError):
        sync(f"hdfs://127.0.0.1:{free_port()}/x", "/tmp/vpipe-never-created")
    assert not os.path.exists("/tmp/vpipe-never-created")


def test_hostile_names_are_rejected(hdfs, gluster, src, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client, root, url = src
    # HDFS refuses '..' components itself; control characters and backslashes it allows.
    put_tree(client, root, {"good.txt": b"ok", "evil\nname": b"x", "back\\slash": b"y"})
    outside = tmp_path / "outside"
    outside.mkdir()
    put_tree(client, root, {"link/escaped.txt": b"z"})
    dst = gluster.fresh_dir("hostile")
    os.symlink(outside, dst / "link")  # a destination symlink must not be followed

    with pytest.raises(SyncFailed) as info:
        sync(url, str(dst))

    result = info.value.result
    assert info.value.exit_code == 1
    assert {f["path"] for f in result.failures} == {"evil\nname", "back\\slash"}
    assert list(outside.iterdir()) == []
    assert not (dst / "link").is_symlink() and (dst / "link/escaped.txt").read_bytes() == b"z"
    assert read_tree(dst) == {"good.txt": b"ok", "link/escaped.txt": b"z"}


def test_viewfs_source_through_a_mount_table(hdfs, gluster, src, tmp_path) -> None:  # type: ignore[no-untyped-def]
    client, root, _ = src
    files = _files(n=3)
    put_tree(client, root, files)
    conf = tmp_path / "conf"
    conf.mkdir()
    # hdfs-native 0.14 needs a linkFallback in the mount table to build a viewfs client.
    (conf / "core-site.xml").write_text(
        "<configuration>"
        f"<property><name>fs.viewfs.mounttable.lake.link./datasets</name><value>{hdfs.url}{root}</value></property>"
        f"<property><name>fs.viewfs.mounttable.lake.linkFallback</name><value>{hdfs.url}/</value></property>"
        "</configuration>"
    )
    dst = gluster.fresh_dir("viewfs")

    result = sync("viewfs://lake/datasets", str(dst), hadoop_conf_dir=str(conf))

    assert result.copied == len(files) and read_tree(dst) == files
