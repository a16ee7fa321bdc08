"""A real HTTP file server for tests (one for every suite: the fetch script's, the local
backend's, the images', the real node's): a directory, served from a thread. It records every
request it gets (path with query, Authorization header), and can be told to demand Basic
auth, to answer some requests with an error first, or to redirect."""

from __future__ import annotations

import base64
import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Seen:
    path: str  # as requested, query included
    authorization: str | None


@dataclass
class FileServer:
    root: Path
    base: str = ""
    requests: list[Seen] = field(default_factory=list)
    # path (without query) -> statuses to answer first, one per request, before serving it
    failures: dict[str, list[int]] = field(default_factory=dict)
    # path (without query) -> Location to redirect to (302)
    redirects: dict[str, str] = field(default_factory=dict)
    # "user:password": every request must carry it as Basic auth, else 401
    credentials: str | None = None

    def paths(self) -> list[str]:
        return [seen.path for seen in self.requests]


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


class _Handler(http.server.SimpleHTTPRequestHandler):
    state: FileServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _empty(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": "0"}.items():
            self.send_header(name, value)
        self.end_headers()

    def do_GET(self) -> None:
        state = self.state
        given = self.headers.get("Authorization")
        state.requests.append(Seen(self.path, given))
        path = self.path.split("?", 1)[0]
        if state.credentials is not None and given != basic(state.credentials):
            self._empty(401, {"WWW-Authenticate": 'Basic realm="code"'})
        elif state.failures.get(path):
            self._empty(state.failures[path].pop(0), {})
        elif path in state.redirects:
            self._empty(302, {"Location": state.redirects[path]})
        else:
            super().do_GET()


@contextmanager
def running(server: http.server.ThreadingHTTPServer) -> Iterator[None]:
    """`server` answering from a daemon thread until the block ends."""
    # shutdown() waits for the loop's next poll: 0.5 s by default, paid by every test that
    # starts a server; a short poll costs a few idle wake-ups instead.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def serve(root: Path, *, host: str = "127.0.0.1", **options: Any) -> Iterator[FileServer]:
    """Serve `root` on `host` (a free port); `.base` is its URL, without a trailing '/'."""
    state = FileServer(root=root, **options)
    handler = type("Handler", (_Handler,), {"state": state})
    server = http.server.ThreadingHTTPServer((host, 0), functools.partial(handler, directory=str(root)))
    state.base = f"http://{host}:{server.server_address[1]}"
    with running(server):
        yield state
