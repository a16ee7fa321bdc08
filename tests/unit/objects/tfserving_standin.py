"""A stand-in for TF Serving's REST API (the TF Serving binary cannot run here: no container
runtime on the control plane's fake nodes). It answers `GET /v1/models/<name>` with the
documented model status JSON, walking through a script of answers (the last one repeats),
and `POST /v1/models/<name>:predict` with a fixed answer. Every request is recorded."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.http_server import running


def status_body(*versions: tuple[int, str], error_code: str = "OK", error_message: str = "") -> dict[str, Any]:
    """TF Serving's GetModelStatus answer, as its REST API documents it (int64 versions as
    JSON strings)."""
    return {"model_version_status": [
        {"version": str(v), "state": state, "status": {"error_code": error_code, "error_message": error_message}}
        for v, state in versions
    ]}


@dataclass
class StandIn:
    model: str
    script: list[tuple[int, Any]]  # (HTTP status, JSON body) answered in turn; the last one repeats
    predict: tuple[int, Any] = (200, {"predictions": [[0.5]]})
    requests: list[tuple[str, str, Any]] = field(default_factory=list)  # (method, path, JSON body)
    url: str = ""
    _served: int = 0

    def next_status(self) -> tuple[int, Any]:
        answer = self.script[min(self._served, len(self.script) - 1)]
        self._served += 1
        return answer


class _Handler(http.server.BaseHTTPRequestHandler):
    state: StandIn

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.state.requests.append(("GET", self.path, None))
        if self.path == f"/v1/models/{self.state.model}":
            self._send(*self.state.next_status())
        else:
            self._send(404, {"error": f"Servable not found for request: {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        self.state.requests.append(("POST", self.path, body))
        if self.path == f"/v1/models/{self.state.model}:predict":
            self._send(*self.state.predict)
        else:
            self._send(404, {"error": "Malformed request"})


@contextmanager
def standin(model: str, script: list[tuple[int, Any]], *, bind: str = "127.0.0.1", **kwargs: Any) -> Iterator[StandIn]:
    state = StandIn(model=model, script=script, **kwargs)
    handler = type("Handler", (_Handler,), {"state": state})
    server = http.server.ThreadingHTTPServer((bind, 0), handler)
    state.url = f"http://{bind}:{server.server_address[1]}"
    with running(server):
        yield state
