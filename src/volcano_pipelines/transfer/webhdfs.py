"""File data over WebHDFS without fsspec or requests: one HTTP request to the NameNode
(`op=OPEN`, its redirect not followed) names a DataNode; the DataNode streams the file's
bytes as the body of one response (it has verified the block checksums itself), and the
body is read straight into the caller's buffer (`readinto`, i.e. `recv_into`), which
`transfer/copy.py` writes with `pwrite`: no Python object per packet and no copy in
user space. A range is one such request (`offset`, `length`), so a large file is read as
several ranges in parallel like hdfs:// files are.

Simple authentication only (`user.name`); a Kerberos source keeps fsspec's `webhdfs`
(SPNEGO through requests-kerberos). Listing and stat stay with fsspec."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

__all__ = ["WebHdfsData", "WebHdfsFile"]

_REDIRECTS = (301, 302, 303, 307, 308)
# Java exceptions the NameNode / DataNode name in a RemoteException body that are not
# worth retrying; anything else is an OSError (transient: retried with backoff).
_NOT_FOUND = ("FileNotFoundException",)
_DENIED = ("AccessControlException", "SecurityException", "AuthorizationException")


def _remote_error(status: int, body: bytes, what: str) -> OSError:
    """An HTTP error answer as the OSError sources.py classifies (FileNotFoundError and
    PermissionError are final, other OSErrors are retried)."""
    name, message = "", body[:300].decode("utf-8", "replace").strip()
    try:
        remote = json.loads(body)["RemoteException"]
        name, message = str(remote.get("exception", "")), str(remote.get("message", message))
    except (ValueError, KeyError, TypeError):
        pass
    text = f"{what}: HTTP {status} {name} {message}".strip()
    if name in _NOT_FOUND or status == 404:
        return FileNotFoundError(text)
    if name in _DENIED or status in (401, 403):
        return PermissionError(text)
    return OSError(text)


class _Body:
    """The body of one DataNode answer: `readinto` fills the caller's buffer (a short
    count only at the end), `close` drops the connection."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self.length = resp.length  # Content-Length (None when the server sent none)

    def readinto(self, buf: Any) -> int:
        try:
            n = self._resp.readinto(buf)
        except http.client.HTTPException as err:  # IncompleteRead: the DataNode went away
            raise ConnectionError(f"WebHDFS read failed: {err!r}") from None
        if not n and len(buf) and self._resp.length:
            # http.client returns 0 when the connection ends before Content-Length bytes.
            raise ConnectionError(f"WebHDFS read ended {self._resp.length} bytes short of the announced length")
        return n

    def close(self) -> None:
        self._resp.close()
        self._conn.close()


class WebHdfsData:
    """The data side of a WebHDFS source at `host:port` (the NameNode's HTTP address)."""

    def __init__(self, host: str, port: int, user: str | None, timeout: float = 60.0) -> None:
        self.host = host
        self.port = port
        self.user = user
        self.timeout = timeout

    def _get(self, host: str, port: int, target: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        try:
            conn.request("GET", target, headers={"Accept-Encoding": "identity"})
            resp = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        if conn.sock is not None:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, resp

    def location(self, path: str, offset: int, length: int | None) -> str:
        """The DataNode URL the NameNode redirects an OPEN of this range to."""
        query: dict[str, Any] = {"op": "OPEN", "offset": offset, "noredirect": "true"}
        if length is not None:
            query["length"] = length
        if self.user:
            query["user.name"] = self.user
        conn, resp = self._get(self.host, self.port, f"/webhdfs/v1{quote(path)}?{urlencode(query)}")
        try:
            body = resp.read()
            if resp.status in _REDIRECTS:
                where = resp.getheader("Location")
            elif resp.status == 200:
                try:
                    where = json.loads(body)["Location"]
                except (ValueError, KeyError, TypeError):
                    raise OSError(f"WebHDFS OPEN {path}: no Location in the NameNode's answer") from None
            else:
                raise _remote_error(resp.status, body, f"WebHDFS OPEN {path}")
        finally:
            conn.close()
        if not where:
            raise OSError(f"WebHDFS OPEN {path}: no Location in the NameNode's answer")
        return str(where)

    def open_range(self, path: str, offset: int, length: int | None) -> _Body:
        """The body of `length` bytes (None: to the end) of `path` from `offset`."""
        url = urlsplit(self.location(path, offset, length))
        if url.scheme != "http" or not url.hostname:
            raise OSError(f"WebHDFS OPEN {path}: unsupported DataNode URL scheme {url.scheme!r}")
        target = url.path + (f"?{url.query}" if url.query else "")
        conn, resp = self._get(url.hostname, url.port or 80, target)
        if resp.status != 200:
            try:
                raise _remote_error(resp.status, resp.read(), f"WebHDFS read of {path}")
            finally:
                conn.close()
        return _Body(conn, resp)


class WebHdfsFile:
    """One source file for transfer/copy.py: `range_reader(offset, length)` for the parallel
    range path, `readinto` / `read` for a whole-file sequential read (opened lazily)."""

    def __init__(self, data: WebHdfsData, path: str) -> None:
        self._data = data
        self._path = path
        self._whole: _Body | None = None
        self._ranges: list[_Body] = []

    def range_reader(self, offset: int, length: int) -> _Body:
        body = self._data.open_range(self._path, offset, length)
        self._ranges.append(body)
        return body

    def _body(self) -> _Body:
        if self._whole is None:
            self._whole = self._data.open_range(self._path, 0, None)
        return self._whole

    def readinto(self, buf: Any) -> int:
        return self._body().readinto(buf)

    def read(self, n: int = -1) -> bytes:
        body = self._body()
        if n is None or n < 0:
            chunks: list[bytes] = []
            while True:
                piece = self.read(8 << 20)
                if not piece:
                    return b"".join(chunks)
                chunks.append(piece)
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = body.readinto(view[got:])
            if not k:
                break
            got += k
        del view
        del buf[got:]
        return bytes(buf)

    def close(self) -> None:
        for body in [*self._ranges, *([self._whole] if self._whole else [])]:
            body.close()
        self._ranges, self._whole = [], None

    def __enter__(self) -> WebHdfsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
