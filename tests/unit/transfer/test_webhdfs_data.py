"""transfer/webhdfs.py against a fake WebHDFS (one local HTTP server playing the NameNode,
which redirects OPEN, and the DataNode, which streams the bytes): ranges read in parallel
into the copier's buffer, whole-file reads, and errors mapped to what the retry policy
classifies."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from volcano_pipelines.transfer import copy
from volcano_pipelines.transfer.retries import is_transient
from volcano_pipelines.transfer.webhdfs import WebHdfsData, WebHdfsFile

DATA = os.urandom(3 * (1 << 20) + 12345)


class _Fake(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {"/d/big.bin": DATA}
    requests: list[str] = []
    short = False  # the DataNode sends fewer bytes than it announced, then hangs up

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        type(self).requests.append(self.path)
        path = url.path.removeprefix("/webhdfs/v1")
        if url.path.startswith("/webhdfs/"):  # the NameNode
            if path == "/denied":
                body = json.dumps({"RemoteException": {"exception": "AccessControlException", "message": "no"}})
                self._answer(403, body.encode())
            elif path not in self.files:
                body = json.dumps({"RemoteException": {"exception": "FileNotFoundException", "message": path}})
                self._answer(404, body.encode())
            else:
                self.send_response(307)
                self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/dn{url.path}?{url.query}")
                self.send_header("Content-Length", "0")
                self.end_headers()
            return
        data = self.files[path.removeprefix("/dn/webhdfs/v1")]
        off = int(q.get("offset", 0))
        end = len(data) if "length" not in q else min(len(data), off + int(q["length"]))
        body = data[off:end]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body[: len(body) // 2] if type(self).short else body)

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[WebHdfsData]:
    _Fake.requests, _Fake.short = [], False
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)  # shutdown waits one poll
    thread.start()
    try:
        yield WebHdfsData("127.0.0.1", srv.server_port, "alice", timeout=10)
    finally:
        srv.shutdown()
        srv.server_close()


def _copy(data: WebHdfsData, out: Path, size: int, streams: int) -> tuple[int, int]:
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with ThreadPoolExecutor(4) as pool, WebHdfsFile(data, "/d/big.bin") as f:
            return copy.copy_stream(f, fd, size, chunk_size=1 << 20, streams=streams, pool=pool,
                                    on_bytes=lambda n: None, abandon=threading.Event())
    finally:
        os.close(fd)


def test_a_large_file_is_read_as_parallel_ranges_into_place(server: WebHdfsData, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(copy, "MIN_RANGE", 1 << 20)
    written, reads = _copy(server, tmp_path / "out", len(DATA), streams=3)
    assert written == len(DATA) and reads == 4  # three ranges: more than one read
    assert (tmp_path / "out").read_bytes() == DATA
    opens = [r for r in _Fake.requests if r.startswith("/webhdfs/")]
    assert len(opens) == 3 and all("user.name=alice" in r and "noredirect=true" in r for r in opens)


def test_a_whole_file_read_and_read_n(server: WebHdfsData) -> None:
    with WebHdfsFile(server, "/d/big.bin") as f:
        assert f.read(10) == DATA[:10]
        assert f.read() == DATA[10:]
        assert f.read(5) == b""


def test_a_body_shorter_than_announced_is_a_transient_error(server: WebHdfsData, tmp_path: Path) -> None:
    _Fake.short = True
    with pytest.raises(OSError) as err:
        _copy(server, tmp_path / "out", len(DATA), streams=1)
    assert is_transient(err.value)


def test_a_listed_size_larger_than_the_file_is_a_changed_source(server: WebHdfsData, tmp_path: Path) -> None:
    with pytest.raises(copy.SourceChanged):
        _copy(server, tmp_path / "out", len(DATA) + 100, streams=1)


def test_remote_errors_map_to_final_and_transient_os_errors(server: WebHdfsData) -> None:
    with pytest.raises(FileNotFoundError):
        server.open_range("/missing", 0, None)
    with pytest.raises(PermissionError):
        server.open_range("/denied", 0, None)
    assert not is_transient(FileNotFoundError()) and not is_transient(PermissionError())
