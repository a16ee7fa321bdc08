"""Real local servers that answer like anything but the API a step expects, for the tests
of what a step does when its kubeconfig (or --host) points at the wrong thing: a web page, an
unrelated JSON service, a binary port, a server that accepts and never answers, errors with
HTML bodies. Plain HTTP or TLS (a self-signed certificate made with openssl for 127.0.0.1).

Each server records the requests it saw, so a test can also show that nothing was sent after
the first bad answer (no object created behind an error)."""

from __future__ import annotations

import http.server
import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

# What each kind of server answers to every request: (status, content type, body).
ANSWERS: dict[str, tuple[int, str, bytes]] = {
    "html": (200, "text/html; charset=utf-8", b"<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>"),
    "json": (200, "application/json", json.dumps({"status": "ok", "items": "none", "version": 3}).encode()),
    "json-list": (200, "application/json", b"[1, 2, 3]"),
    "binary": (200, "application/octet-stream", bytes(range(256)) * 8),
    "binary-as-json": (200, "application/json", b"\xff\xfe\x00\x81" * 64),
    "empty": (200, "application/json", b""),
    "html-500": (500, "text/html", b"<html><body>502 Bad Gateway (nginx)</body></html>"),
    "html-401": (401, "text/html", b"<html><body>Please log in</body></html>"),
    "json-401": (401, "application/json", json.dumps({"error": "token expired", "code": 16}).encode()),
    "json-500": (500, "application/json", json.dumps({"error": "internal", "code": 13}).encode()),
    # What any plain web server answers for a path it does not have.
    "html-404": (404, "text/html", b"<html><head><title>404 Not Found</title></head><body>Not Found</body></html>"),
    # JSON of some other service: not a WebHDFS FileStatus, not a Kubernetes object.
    "json-other": (200, "application/json", json.dumps({"foo": [1, 2, 3]}).encode()),
}
KINDS_200 = ("html", "json", "json-list", "binary", "binary-as-json", "empty")


@dataclass
class Server:
    kind: str
    url: str
    ca_file: str | None
    requests: list[tuple[str, str]] = field(default_factory=list)

    def kubeconfig(self, directory: Path, namespace: str = "team-a") -> str:
        cluster: dict[str, object] = {"server": self.url}
        if self.ca_file:
            cluster["certificate-authority"] = self.ca_file
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "hostile",
            "clusters": [{"name": "hostile", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
            "contexts": [{"name": "hostile", "context": {"cluster": "hostile", "user": "u", "namespace": namespace}}],
        }
        path = directory / f"kubeconfig-{self.kind}-{'tls' if self.ca_file else 'http'}"
        path.write_text(yaml.safe_dump(doc))
        return str(path)


def certificate(directory: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (key, cert): the cert is its own CA."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is needed to make the TLS test server's certificate")
    key, cert = directory / "server.key", directory / "server.crt"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                        "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
    return str(key), str(cert)


@contextmanager
def serve(kind: str, *, tls_dir: Path | None = None) -> Iterator[Server]:
    """A threaded server answering every request as `kind` says; "silent" accepts, reads the
    request and never answers (until the server stops)."""
    stop = threading.Event()
    seen: list[tuple[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            seen.append((self.command, self.path))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if kind == "silent":
                stop.wait()
                return
            status, content_type, body = ANSWERS[kind]
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ca_file = None
    if tls_dir is not None:
        key, cert = certificate(tls_dir)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        ca_file = cert
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    scheme = "https" if tls_dir is not None else "http"
    try:
        yield Server(kind, f"{scheme}://127.0.0.1:{server.server_address[1]}", ca_file, seen)
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


@contextmanager
def silent_listener() -> Iterator[str]:
    """A socket that accepts connections (the kernel's backlog does) and never reads or
    answers: not even a TLS handshake completes. Yields its http URL (host:port)."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


# What a Hadoop RPC server answers to a client's SASL NEGOTIATE on a cluster with simple
# authentication: one frame, RpcResponseHeaderProto {callId: -33, status: SUCCESS} and
# RpcSaslProto {state: SUCCESS}.
RPC_SASL_SUCCESS = b"\x00\x00\x00\x0c" + b"\x08\x08\xdf\xff\xff\xff\x0f\x10\x00" + b"\x02\x10\x00"
# What a NameNode's HTTP port (Jetty) answers to those bytes, seen from a real one (MiniDFSCluster).
JETTY_400 = (b"HTTP/1.1 400 Illegal character HTAB=0x9\r\nContent-Type: text/html;charset=iso-8859-1\r\n"
             b"Content-Length: 69\r\nConnection: close\r\n\r\n"
             b"<h1>Bad Message 400</h1><pre>reason: Illegal character HTAB=0x9</pre>")


@dataclass
class Listener:
    """A TCP server's address and what it has seen: `connections` accepted, `received` bytes
    (all connections together)."""

    address: str
    connections: list[object] = field(default_factory=list)
    received: bytearray = field(default_factory=bytearray)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self, data: bytes) -> bool:
        with self.lock:
            return data in self.received


@contextmanager
def tcp_server(kind: str) -> Iterator[Listener]:
    """A TCP server for the tests of `vpipe sync hdfs://` pointed at the wrong thing. "silent":
    accepts and reads, never answers. "rpc-then-silent": answers the first Hadoop RPC connection
    header with a SASL SUCCESS (the probe a client makes passes) and then never answers a call,
    like a NameNode that hangs after the handshake. "jetty-400": answers what a NameNode's HTTP
    port answers (JETTY_400) and closes the connection."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.1)
    stop = threading.Event()
    listener = Listener(f"127.0.0.1:{sock.getsockname()[1]}")

    def handle(conn: socket.socket) -> None:
        answered = False
        conn.settimeout(0.1)
        with conn:
            while not stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                with listener.lock:
                    listener.received += data
                if kind == "rpc-then-silent" and not answered and data.startswith(b"hrpc"):
                    answered = True
                    conn.sendall(RPC_SASL_SUCCESS)
                if kind == "jetty-400":
                    conn.sendall(JETTY_400)
                    return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            listener.connections.append(conn)
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        stop.set()
        thread.join()
        sock.close()
