"""The two hdfs:// read paths against a real HDFS (MiniDFSCluster) into a real GlusterFS volume:
the stock hdfs-native (a `bytes` per packet, `hdfs-packets`) and the patched one that
images/hdfs-native/ builds (`hdfs-readinto`: a range's packets written by `write_to`, or read
into the copier's buffers with `readinto` where --checksum hashes them). Each copies small and
large files exactly (with --checksum too), says which path it took, and refuses a block replica whose bytes
no longer match their CRC32C (the DataNode sends the stored checksums; hdfs-native checks
every 512-byte chunk): the file fails, nothing is left under its name, the other files copy,
and hdfs-native's own warning names the checksum as the reason.

Both run in a subprocess (hdfs-native's warnings on its stderr); the patched path with the
patched wheel unpacked first on PYTHONPATH (this environment keeps the stock wheel). It needs the wheel in the build cache (`python
images/hdfs-native/build.py`, minutes of cargo on a cold cache, kept out of CI's cold run:
docs/sync.md) and skips without it, in CI too."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.storage.trees import put_tree, read_tree, temp_files
from volcano_pipelines.transfer import engine
from volcano_pipelines.transfer.executor import Options
from volcano_pipelines.transfer.progress import Progress
from volcano_pipelines.transfer.result import SyncFailed
from volcano_pipelines.transfer.sources import HDFS_PACKETS, HDFS_READINTO, hdfs_read_path
from volcano_pipelines.transfer.urls import parse_source

pytestmark = [pytest.mark.hdfs, pytest.mark.gluster, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 1 << 20  # files over it take the range path, the others one read


def _files() -> dict[str, bytes]:
    return {
        "small/a.bin": os.urandom(70_000),  # one read, two packets
        "small/b.txt": b"hello\n",
        "large/c.bin": os.urandom((5 << 20) + 777),  # ranges (over CHUNK), an odd tail
        "large/d.bin": os.urandom(3 << 20),
    }


def copy_quickly(url: str, dst: str, checksum: str = "") -> dict[str, Any]:
    """The sync engine with two attempts a file and no real back-off (a corrupt replica is
    corrupt on every attempt); the result as `--json` has it. Run here and in the subprocess.
    `checksum` (non-empty): --checksum, whose hash reads the bytes (the patched path's
    `readinto`, not its `write_to`)."""
    request = engine.SyncRequest(src=url, location=parse_source(url), root=dst,
                                 options=Options(chunk_size=CHUNK, max_attempts=2, retry_delay=0.01,
                                                 checksum=bool(checksum)))
    try:
        return engine.run(request, Progress()).to_dict()
    except SyncFailed as err:
        return err.result.to_dict()


def _patched_site() -> Path:
    spec = importlib.util.spec_from_file_location("hdfs_native_build", ROOT / "images" / "hdfs-native" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    wheel = build.cached_wheel()
    if wheel is None:
        pytest.skip("the patched hdfs-native wheel is not built (python images/hdfs-native/build.py; "
                    "not part of CI's cold run: docs/sync.md)")
    return Path(build.site(wheel))


def _copy_with(path: str, url: str, dst: Path, checksum: bool = False) -> tuple[dict[str, Any], str]:
    """copy_quickly in a subprocess with hdfs-native's warnings on (RUST_LOG): its result and
    stderr, where hdfs-native names why it gave up on a replica."""
    pythonpath = [str(ROOT)]
    if path == HDFS_READINTO:
        pythonpath.insert(0, str(_patched_site()))
    elif hdfs_read_path() != HDFS_PACKETS:
        pytest.skip("this environment has the patched hdfs-native installed: no stock path to test here")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath), "RUST_LOG": "hdfs_native=warn"}
    code = ("import json, sys; from tests.integration.test_sync_hdfs_read_paths import copy_quickly; "
            "print(json.dumps(copy_quickly(*sys.argv[1:])))")
    done = subprocess.run([sys.executable, "-c", code, url, str(dst), "yes" if checksum else ""], env=env,
                          capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def _corrupt_replica(base: Path, content: bytes) -> Path:
    """Flip one byte in the middle of the block file holding `content` (a one-block file),
    leaving its size and its .meta checksums as they were: a replica gone bad on disk."""
    found = [p for p in base.rglob("blk_*") if not p.name.endswith(".meta") and p.stat().st_size == len(content)
             and p.read_bytes() == content]
    assert len(found) == 1, f"expected one replica of the file under {base}, found {found}"
    block = found[0]
    data = bytearray(block.read_bytes())
    data[len(data) // 2] ^= 0xFF
    block.write_bytes(bytes(data))
    return block


@pytest.mark.parametrize("path", [HDFS_PACKETS, HDFS_READINTO])
def test_each_read_path_copies_exactly_and_refuses_a_corrupt_replica(hdfs, gluster, path: str) -> None:  # type: ignore[no-untyped-def]
    client = hdfs.client()
    root = f"/read-paths/{uuid.uuid4().hex[:8]}"
    url = f"{hdfs.url}{root}"
    files = _files()
    put_tree(client, root, files)

    dst = gluster.fresh_dir("read-path")
    first, _ = _copy_with(path, url, dst)
    assert first["read_path"] == path
    assert (first["copied"], first["failed"], first["error"]) == (len(files), 0, None)
    assert read_tree(dst) == files
    dst = gluster.fresh_dir("read-path-checksum")
    hashed, _ = _copy_with(path, url, dst, checksum=True)
    assert (hashed["copied"], hashed["failed"]) == (len(files), 0) and read_tree(dst) == files

    # One small and one large file go bad on the DataNode's disk: both paths must refuse them.
    for rel in ("small/a.bin", "large/c.bin"):
        _corrupt_replica(hdfs.base, files[rel])
    dst = gluster.fresh_dir("read-path-corrupt")
    second, warnings = _copy_with(path, url, dst)
    assert second["read_path"] == path
    assert (second["copied"], second["failed"]) == (2, 2), second
    assert {f["path"] for f in second["failures"]} == {"small/a.bin", "large/c.bin"}
    # hdfs-native gives up on the only replica ("All DataNodes failed") because its CRC32C check failed:
    assert "Error occurred while reading from DataNode: ChecksumError" in warnings, warnings[-3000:]
    assert read_tree(dst) == {rel: files[rel] for rel in ("small/b.txt", "large/d.bin")}
    assert temp_files(dst) == []
