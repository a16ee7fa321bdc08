"""Sync hardening where the storage matters: an emptied HDFS path against a staged dataset
on GlusterFS (the --delete guard), a destination reached through a symlink on the
GlusterFS mount, and the destination lock seen across processes and FUSE mounts (a live
sync's temporary file is not a leftover)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.storage.trees import put_tree, read_tree, temp_files
from volcano_pipelines.cli import main
from volcano_pipelines.transfer.plan import temp_name

pytestmark = [pytest.mark.gluster, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]


def _sync(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["sync", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.hdfs
def test_an_emptied_hdfs_path_does_not_erase_the_staged_dataset(hdfs, gluster, capsys) -> None:  # type: ignore[no-untyped-def]
    client = hdfs.client()
    root = f"/data/{uuid.uuid4().hex[:8]}"
    files = {f"part/{i}.bin": os.urandom(1000 + i) for i in range(6)}
    put_tree(client, root, files)
    url = f"{hdfs.url}{root}"
    dst = gluster.fresh_dir("guard")
    assert _sync(capsys, url, str(dst), "-q")[0] == 0
    # The job that writes the dataset failed and left the path empty.
    client.delete(root, True)
    client.mkdirs(root, create_parent=True)

    code, out, err = _sync(capsys, url, str(dst), "--delete", "--json", "-q")

    assert code == 2
    assert "refusing to delete all 6 file(s)" in err and "--force-delete" in err
    assert json.loads(out)["error"] == err.strip().removeprefix("vpipe: error: ")
    assert read_tree(dst) == files
    code, out, _ = _sync(capsys, url, str(dst), "--delete", "--force-delete", "--json", "-q")
    assert code == 0 and json.loads(out)["deleted"] == 6 and read_tree(dst) == {}


def test_a_symlinked_destination_inside_the_source_on_glusterfs_is_refused(gluster, capsys) -> None:  # type: ignore[no-untyped-def]
    base = gluster.fresh_dir("nest")
    src = base / "s12"
    (src / "d").mkdir(parents=True)
    (src / "d" / "a").write_bytes(b"a")
    (base / "s12link").symlink_to(src)
    before = sorted(str(p) for p in src.rglob("*"))
    for _ in range(3):
        code, _, err = _sync(capsys, str(src), str(base / "s12link" / "inner"), "-q")
        assert code == 2 and "outside the source" in err
    code, _, err = _sync(capsys, str(base / "s12link" / "d"), str(src), "--delete", "-q")
    assert code == 2 and "does not contain the source" in err
    assert sorted(str(p) for p in src.rglob("*")) == before


@contextmanager
def _lock_held_by_another_process(root: Path) -> Iterator[subprocess.Popen[str]]:
    """A separate process holding the destination lock, as a running sync does."""
    code = (
        "import sys\n"
        "from volcano_pipelines.transfer.dest import DestLock\n"
        "with DestLock(sys.argv[1]):\n"
        "    print('locked', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen([sys.executable, "-c", code, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
        yield proc
    finally:
        proc.communicate(input="")  # EOF: it lets go and exits


@contextmanager
def _second_mount(gluster, tmp_path: Path) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    """The same volume mounted again, as a pod on another node sees it."""
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["mount", "-t", "glusterfs", f"{socket.gethostname()}:/{gluster.volume.name}", str(other)], check=True)
    try:
        yield other
    finally:
        subprocess.run(["umount", "-l", str(other)], check=False)


def test_a_live_syncs_temporary_file_is_not_a_leftover_on_glusterfs(gluster, capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(5000))
    dst = gluster.fresh_dir("live")
    sync_temp = dst / temp_name("a.bin", "00112233aabbccdd")
    with _lock_held_by_another_process(dst):
        sync_temp.write_bytes(b"being written")
        for seen_from in ("this mount", "another mount"):
            with (_second_mount(gluster, tmp_path) if seen_from == "another mount" else _same(dst.parent)) as mount:
                view = mount / dst.name
                code, out, err = _sync(capsys, str(src), str(view), "--dry-run", "--json")
                assert code == 0, err
                assert [i for i in json.loads(out)["plan"] if i["action"] == "cleanup"] == [], seen_from
                assert "its 1 temporary file(s) are not leftovers" in err, seen_from
                code, _, err = _sync(capsys, str(src), str(view), "-q")
                assert code == 1 and "another sync holds the lock" in err, seen_from
        assert temp_files(dst) == [str(sync_temp)]
    # The holder is gone: now the file is a leftover, and cleaned.
    code, out, _ = _sync(capsys, str(src), str(dst), "--json", "-q")
    assert code == 0 and json.loads(out)["cleaned"] == 1 and temp_files(dst) == []


@contextmanager
def _same(path: Path) -> Iterator[Path]:
    yield path
