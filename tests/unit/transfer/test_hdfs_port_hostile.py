"""`vpipe sync hdfs://HOST:PORT/...` pointed at a port that is not a NameNode's RPC port (issue
42, item 5): a web server (the NameNode's HTTP port is the common mistake), a port that accepts
and never answers, and a server that passes the handshake and then never answers a call. Before:
nothing for minutes (hdfs-native waits without a deadline), and SIGTERM / Ctrl-C unanswered
until the wait ended; only SIGKILL stopped it. Now: exit 3 in seconds naming what the port did,
and a signal ends the run within about a second at any of these points. Real local servers
(tests/hostile_servers.py); the signals go to a real `vpipe sync` process."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile_servers import Server, serve, tcp_server
from volcano_pipelines.cli import main
from volcano_pipelines.errors import EXIT_CLUSTER
from volcano_pipelines.transfer import sources
from volcano_pipelines.transfer.namenode_probe import ANSWER_TIMEOUT, check_namenodes

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("kind", "said"), [
    # Python's http.server takes the bytes for an HTTP/0.9 request: an error page, no status line.
    ("http.server", "answered with a web page, not like a Hadoop RPC server"),
    ("jetty-400", "answered like a web server ('HTTP/1.1 400 Illegal character HTAB=0x9'), not a Hadoop RPC server"),
])
def test_a_web_server_is_named_as_one_in_seconds_with_exit_3(kind: str, said: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with serve("html") if kind == "http.server" else tcp_server(kind) as server:
        address = server.url.split("//", 1)[1] if isinstance(server, Server) else server.address
        started = time.monotonic()
        code = main(["sync", f"hdfs://{address}/data", str(tmp_path / "d"), "--json", "-q"])
        took = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == EXIT_CLUSTER, err
    report = json.loads(out)
    assert said in report["error"] and address in report["error"], report["error"]
    assert "webhdfs://" in report["error"]  # what the user probably meant
    assert err.strip() == f"vpipe: error: {report['error']}" and "Traceback" not in err
    assert took < ANSWER_TIMEOUT, took  # a web server answers at once: no waiting for a timeout
    assert not (tmp_path / "d").exists()


def test_a_silent_port_is_named_as_silent_with_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The probe's answer timeout shortened to 1 s (the real one, 5 s, is what every test here
    # would otherwise wait out): what is checked is that the silence is named, not its length.
    answer_timeout = 1.0
    monkeypatch.setattr(sources, "check_namenodes", functools.partial(check_namenodes, answer_timeout=answer_timeout))
    with tcp_server("silent") as server:
        started = time.monotonic()
        code = main(["sync", f"hdfs://{server.address}/data", str(tmp_path / "d"), "--json", "-q"])
        took = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == EXIT_CLUSTER, err
    error = json.loads(out)["error"]
    assert f"{server.address} accepted the connection but did not answer the Hadoop RPC connection header in 1 s" in error
    assert server.received.startswith(b"hrpc")  # it was asked like a NameNode
    assert answer_timeout <= took < answer_timeout + 5, took
    assert not (tmp_path / "d").exists()


def _start(src: str, dst: Path) -> subprocess.Popen[str]:
    """`vpipe sync SRC DST --json` as its own process, with Python's own SIGINT handler (the
    gated_fs launcher: `vpipe` plus that, whatever the test run itself ignores)."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + str(REPO))
    return subprocess.Popen([sys.executable, "-m", "tests.unit.transfer.gated_fs", "sync", src, str(dst), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def _until(what: str, condition: object, proc: subprocess.Popen[str], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():  # type: ignore[operator]
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.02)  # polling what a server saw; no timing is asserted here


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("kind", ["silent", "rpc-then-silent"], ids=["while-probing", "while-listing"])
def test_a_signal_ends_a_sync_waiting_on_the_namenode_within_a_second(kind: str, sig: int, tmp_path: Path) -> None:
    """while-probing: the port accepted and has not answered yet (the probe waits up to 5 s);
    while-listing: the handshake passed and the NameNode never answers the first call (a wait
    inside hdfs-native, which has no deadline: the process would wait for ever)."""
    with tcp_server(kind) as server:
        proc = _start(f"hdfs://{server.address}/data", tmp_path / "d")
        try:
            if kind == "silent":
                _until("the connection", lambda: server.seen(b"hrpc"), proc)
            else:
                _until("the first call", lambda: server.seen(b"getFileInfo"), proc)
            time.sleep(0.3)  # settled in the wait (a signal before it is the easy case)
            sent = time.monotonic()
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
            took = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert took < 2.0, (took, err)
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), err
    assert json.loads(out)["error"] == "interrupted" and "Traceback" not in err
    if sig == signal.SIGTERM:
        assert "vpipe: SIGTERM received" in err
