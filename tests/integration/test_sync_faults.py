"""`sync` under faults, against real HDFS + GlusterFS: kill -9 mid-file, NameNode restart,
a source file rewritten while it is being copied, a destination that fills up."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.storage.trees import put_tree, read_tree, temp_files
from volcano_pipelines.steps._sync import SyncFailed, sync
from volcano_pipelines.transfer.progress import Progress

pytestmark = [pytest.mark.hdfs, pytest.mark.gluster, pytest.mark.timeout(600)]


@pytest.fixture(params=["file", "batch"])
def mode(request: pytest.FixtureRequest) -> str:
    """Every --durability mode that promises durable, whole files runs every fault."""
    return request.param  # type: ignore[no-any-return]


def _root() -> str:
    return f"/faults/{uuid.uuid4().hex[:8]}"


def test_kill_9_mid_large_file_then_rerun(hdfs, gluster, mode) -> None:  # type: ignore[no-untyped-def]
    client, root = hdfs.client(), _root()
    files = {"small.txt": b"s" * 100, "large.bin": os.urandom(96 << 20)}
    put_tree(client, root, files)
    dst = gluster.fresh_dir("kill9")
    cmd = [sys.executable, "-m", "volcano_pipelines", "sync", f"{hdfs.url}{root}", str(dst),
           "--transfers", "1", "--chunk-mib", "1", "--durability", mode, "-q"]

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    partial = None
    deadline = time.monotonic() + 120
    while partial is None and time.monotonic() < deadline and proc.poll() is None:
        for path in temp_files(dst):
            try:
                if os.path.getsize(path) >= 4 << 20:
                    partial = path
            except FileNotFoundError:
                pass
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert partial is not None, "never saw the large file in flight"

    # No partial file is visible under a final name; only the temporary one is left.
    assert not (dst / "large.bin").exists()
    assert os.path.exists(partial) and os.path.getsize(partial) < len(files["large.bin"])

    result = sync(f"{hdfs.url}{root}", str(dst), durability=mode)
    assert result.cleaned >= 1 and result.failed == 0
    assert read_tree(dst) == files
    assert temp_files(dst) == []


class _RestartMidSync(Progress):
    """Restarts the NameNode from inside the sync, and records how far the sync was at
    each step (bytes done, from the sync's own progress):

    - when `after` files are done, the transfer thread that finished the last of them
      stops the NameNode (and waits for the stop);
    - another thread listens on the NameNode's RPC address and waits until the sync's
      client knocks there (it needs the NameNode for the next file), closes that
      connection, and starts the NameNode again. No fixed sleep: the outage lasts until
      the sync has run into it."""

    def __init__(self, hdfs, after: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.hdfs = hdfs
        self.after = after
        self.fired = threading.Event()
        self.restarted = threading.Event()
        self.bytes_at: dict[str, int] = {}
        self.error: BaseException | None = None

    def _mark(self, step: str) -> None:
        with self.lock:
            self.bytes_at[step] = self.bytes_done

    def file_done(self, path: str, result: str) -> None:
        super().file_done(path, result)
        if self.files_done >= self.after and not self.fired.is_set():
            self.fired.set()
            self._mark("stop")
            self.hdfs.stop_namenode()
            threading.Thread(target=self._restart, daemon=True).start()

    def _restart(self) -> None:
        try:
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(("127.0.0.1", self.hdfs.rpc_port))
                probe.listen(8)
                probe.settimeout(120)  # a bound on a hang, not a timing assumption
                conn, _ = probe.accept()
                conn.close()
            self._mark("outage seen")
            self.hdfs.start_namenode()
            self._mark("restarted")
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.error = err
        finally:
            self.restarted.set()


def test_namenode_restart_mid_sync(hdfs, gluster, mode) -> None:  # type: ignore[no-untyped-def]
    client, root = hdfs.client(), _root()
    files = {f"d{i % 7}/f{i:04d}.bin": os.urandom(16 << 10) for i in range(400)}
    total = sum(len(b) for b in files.values())
    put_tree(client, root, files)
    dst = gluster.fresh_dir("nnrestart")
    progress = _RestartMidSync(hdfs, after=40)
    result = sync(f"{hdfs.url}{root}", str(dst), transfers=4, progress=progress, durability=mode)

    assert progress.fired.is_set() and progress.restarted.wait(180) and progress.error is None
    # The restart overlapped the transfer: it began after the first bytes were copied,
    # the sync's client ran into the stopped NameNode, and bytes were still to come once
    # it was back.
    assert 0 < progress.bytes_at["stop"] <= progress.bytes_at["outage seen"] <= progress.bytes_at["restarted"] < total
    assert progress.bytes_done == total
    assert result.failed == 0 and result.copied == len(files)
    assert read_tree(dst) == files
    assert temp_files(dst) == []


def test_source_rewritten_during_copy_is_detected_and_recopied(hdfs, gluster, mode) -> None:  # type: ignore[no-untyped-def]
    from hdfs_native import WriteOptions

    client, root = hdfs.client(), _root()
    old, new = os.urandom(24 << 20), os.urandom(24 << 20)  # same size: only mtime/content differ
    put_tree(client, root, {"moving.bin": old})
    dst = gluster.fresh_dir("modified")
    fired = threading.Event()

    class Rewrite(Progress):
        def advance(self, path: str, nbytes: int) -> None:
            super().advance(path, nbytes)
            if not fired.is_set() and self.bytes_done >= 2 << 20:
                fired.set()
                time.sleep(0.01)  # HDFS mtime has millisecond resolution
                with client.create(f"{root}/moving.bin", WriteOptions(overwrite=True)) as w:
                    w.write(new)

    result = sync(f"{hdfs.url}{root}", str(dst), transfers=1, chunk_mib=1, progress=Rewrite(), durability=mode)

    assert fired.is_set()
    assert result.failed == 0 and result.copied == 1 and result.retried == 1
    assert (dst / "moving.bin").read_bytes() == new
    assert temp_files(dst) == []


def test_full_destination_fails_cleanly(hdfs, gluster, mode) -> None:  # type: ignore[no-untyped-def]
    client, root = hdfs.client(), _root()
    # The small volume has ~50 MiB free; 4 x 20 MiB cannot fit.
    files = {f"chunk{i}.bin": os.urandom(20 << 20) for i in range(4)}
    put_tree(client, root, files)
    dst = gluster.small.mount / f"full-{uuid.uuid4().hex[:6]}"

    try:
        with pytest.raises(SyncFailed) as info:
            sync(f"{hdfs.url}{root}", str(dst), transfers=2, durability=mode)
        err = info.value
        assert err.exit_code == 1 and "destination full" in str(err)
        assert err.result.failed >= 1
        tree = read_tree(dst)
        assert tree and len(tree) < len(files)
        for rel, data in tree.items():  # whatever has a final name is complete
            assert data == files[rel], rel
        assert temp_files(dst) == []
    finally:
        subprocess.run(["rm", "-rf", str(dst)], check=False)


def test_small_file_replaced_right_after_its_read_is_copied_again(hdfs, gluster, mode) -> None:  # type: ignore[no-untyped-def]
    from hdfs_native import WriteOptions

    client, root = hdfs.client(), _root()
    put_tree(client, root, {"small.txt": b"old version\n", "other.txt": b"x"})
    dst = gluster.fresh_dir("recheck")
    fired = threading.Event()

    class Replace(Progress):
        def advance(self, path: str, nbytes: int) -> None:
            super().advance(path, nbytes)
            if path == "small.txt" and not fired.is_set():
                fired.set()
                time.sleep(0.01)
                with client.create(f"{root}/small.txt", WriteOptions(overwrite=True)) as w:
                    w.write(b"new version\n")  # same size: only the mtime tells

    result = sync(f"{hdfs.url}{root}", str(dst), transfers=1, progress=Replace(), durability=mode)

    assert fired.is_set() and result.failed == 0 and result.retried == 1
    assert (dst / "small.txt").read_bytes() == b"new version\n"
    mtime = client.get_file_info(f"{root}/small.txt").modification_time
    assert os.stat(dst / "small.txt").st_mtime_ns == mtime * 1_000_000
