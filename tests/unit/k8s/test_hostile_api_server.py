"""A kubeconfig pointing at something that is not a Kubernetes API server: a web page, an
unrelated JSON service, a binary port, a server that accepts and never answers, errors with
HTML bodies. Real local servers (plain HTTP and TLS, tests/hostile_servers.py), the real
client library, the commands users type: each ends with exit 3 and one clear sentence, never
a traceback, never a "created job" before the error, and never past a bounded time."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile_servers import KINDS_200, serve, silent_listener
from volcano_pipelines.cli import main
from volcano_pipelines.errors import EXIT_CLUSTER
from volcano_pipelines.k8s import retry
REQUEST_TIMEOUT_ENV = "VPIPE_REQUEST_TIMEOUT"  # seconds per API request (k8s/client.py)

# The commands of the issue, each given the hostile server's kubeconfig.
COMMANDS: dict[str, list[str]] = {
    "status": ["status", "mnist"],
    "train": ["train", "tf", "--name", "mnist", "--workers", "1", "--ps", "1", "--code-url", "http://files.example/m/",
              "--run-id", "r1"],
    "reap": ["reap", "mnist", "--grace", "0"],
    "reap-sweep": ["reap", "--selector", "team=ml", "--once"],
    "pv-reuse": ["pv", "reuse", "data-pv", "--for", "data"],
    "namespace-prepare": ["namespace", "prepare", "team-b", "--pull-secret-from", "infra/regcred"],
    "tensorboard": ["tensorboard", "--name", "mnist-tb", "--log-pvc", "logs", "--ttl", "60"],
    "serve": ["serve", "--name", "mnist-serving", "--pvc", "logs", "--timeout", "30"],
}


@pytest.fixture(autouse=True)
def _quick_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    # One second per request: a silent server costs two of them (one retry), not minutes.
    monkeypatch.setenv(REQUEST_TIMEOUT_ENV, "1")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One self-signed certificate for every TLS server of the module: making a key pair costs
    more than most of these tests (certificate() reuses the one in the directory)."""
    return tmp_path_factory.mktemp("tls")


@pytest.fixture()
def silent_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the tests that wait on a silent server: a fifth of a second per request, and the
    retry policy's pause not slept. What they check (one retry at most, then "did not answer in
    time", bounded) does not depend on either length; the time is real waiting, nothing else.
    (A local server reads a request in well under that, even on a loaded machine.)"""
    monkeypatch.setenv(REQUEST_TIMEOUT_ENV, "0.2")
    real_call = retry.call
    monkeypatch.setattr(retry, "call", lambda *a, **k: real_call(*a, **{**k, "sleep": lambda _s: None}))


def run(argv: list[str], kubeconfig: str, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> tuple[int, str, str]:
    caplog.set_level(logging.INFO)
    code = main([*argv, "--kubeconfig", kubeconfig])
    out, err = capsys.readouterr()
    return code, err, caplog.text


# Every command against the three kinds of garbage over HTTP, and over TLS against HTML (what a
# login page or an ingress answers); every kind of garbage against `status`, both ways.
GARBAGE_CASES = ([(command, kind, False) for command in sorted(COMMANDS) for kind in ("html", "json", "binary")]
                 + [(command, "html", True) for command in sorted(COMMANDS)]
                 + [("status", kind, tls) for kind in KINDS_200 for tls in (False, True)
                    if (kind, tls) not in (("html", False), ("json", False), ("binary", False), ("html", True))])


@pytest.mark.parametrize(("command", "kind", "tls"), GARBAGE_CASES,
                         ids=[f"{c}-{k}-{'tls' if t else 'http'}" for c, k, t in GARBAGE_CASES])
def test_a_server_answering_200_garbage_is_a_cluster_error(command: str, kind: str, tls: bool, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture, tls_dir: Path) -> None:
    with serve(kind, tls_dir=tls_dir if tls else None) as server:
        code, err, logged = run(COMMANDS[command], server.kubeconfig(tmp_path), capsys, caplog)
    assert code == EXIT_CLUSTER, err
    assert "not answering like a Kubernetes API server" in err and server.url in err, err
    assert "check the kubeconfig's server address" in err
    assert "created" not in logged
    # Nothing but reads was sent after a bad answer: no create, patch or delete went out.
    assert server.requests and server.requests[0][0] == "GET", server.requests
    assert not [r for r in server.requests if r[0] != "GET"], server.requests


@pytest.mark.parametrize("kind", ["html-500", "json-500"])
def test_server_errors_with_foreign_bodies_are_retried_then_reported(kind: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     caplog: pytest.LogCaptureFixture,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    real_call = retry.call  # the retry policy's pauses, not slept
    monkeypatch.setattr(retry, "call", lambda *a, **k: real_call(*a, **{**k, "sleep": lambda _s: None}))
    with serve(kind) as server:
        code, err, _ = run(COMMANDS["status"], server.kubeconfig(tmp_path), capsys, caplog)
    assert code == EXIT_CLUSTER
    assert "did not answer" in err and "HTTP 500" in err, err
    assert len(server.requests) == 6  # the policy's attempts, then the error


@pytest.mark.parametrize("kind", ["html-401", "json-401"])
@pytest.mark.parametrize("command", ["status", "train", "pv-reuse"])
def test_a_refusal_with_a_foreign_body_is_permission_denied(command: str, kind: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    with serve(kind) as server:
        code, err, logged = run(COMMANDS[command], server.kubeconfig(tmp_path), capsys, caplog)
    assert code == EXIT_CLUSTER
    assert "permission denied" in err and "HTTP 401" in err, err
    assert "created" not in logged


SILENT_CASES = [(command, False) for command in sorted(COMMANDS)] + [("status", True), ("train", True)]


@pytest.mark.parametrize(("command", "tls"), SILENT_CASES,
                         ids=[f"{c}-{'tls' if t else 'http'}" for c, t in SILENT_CASES])
def test_a_server_that_never_answers_costs_two_request_timeouts(command: str, tls: bool, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                caplog: pytest.LogCaptureFixture, tls_dir: Path,
                                                                silent_quickly: None) -> None:
    with serve("silent", tls_dir=tls_dir if tls else None) as server:
        started = time.monotonic()
        code, err, logged = run(COMMANDS[command], server.kubeconfig(tmp_path), capsys, caplog)
        took = time.monotonic() - started
    assert code == EXIT_CLUSTER, err
    assert "did not answer in time" in err, err
    assert "created" not in logged
    # Each request once more at most (reap follows several collections at once), then the error.
    paths = [path for _method, path in server.requests]
    assert paths and max(paths.count(path) for path in paths) <= 2, server.requests
    # Bounded: two 0.2 s requests (the pause is not slept). A hang would be stopped by nothing (before: forever).
    assert took < 30, took


def test_a_listener_that_never_completes_the_tls_handshake_is_bounded(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      caplog: pytest.LogCaptureFixture,
                                                                      silent_quickly: None) -> None:
    with silent_listener() as address:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
            f"clusters: [{{name: c, cluster: {{server: 'https://{address}', insecure-skip-tls-verify: true}}}}]\n"
            "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
        code, err, _ = run(COMMANDS["status"], str(kubeconfig), capsys, caplog)
    assert code == EXIT_CLUSTER
    assert "did not answer in time" in err or "timed out" in err, err


def test_train_timeout_covers_submission(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--timeout` is the step's whole budget: a silent server cannot hold the submission past it
    even when one request may take longer (here 60 s). The shortest budget there is (1 s): the
    test waits it out."""
    monkeypatch.setenv(REQUEST_TIMEOUT_ENV, "60")
    with serve("silent") as server:
        started = time.monotonic()
        code, err, logged = run([*COMMANDS["train"], "--timeout", "1"], server.kubeconfig(tmp_path), capsys, caplog)
        took = time.monotonic() - started
    assert code == EXIT_CLUSTER, err
    assert "timeout of 1s ran out" in err, err
    assert "created" not in logged
    assert took < 20, took  # before: one request alone waited for ever


def test_no_traceback_from_the_installed_command(tmp_path: Path) -> None:
    """The same through the `vpipe` process a user runs: stderr is one sentence."""
    env = {**os.environ, REQUEST_TIMEOUT_ENV: "1"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    # The two processes run side by side (each spends about a second importing the client
    # library), each against its own server; then each is checked as before.
    with serve("binary") as binary, serve("json") as json_garbage:
        running = [subprocess.Popen([sys.executable, "-m", "volcano_pipelines", *COMMANDS["train"], "--kubeconfig",
                                     server.kubeconfig(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=env)
                   for server in (binary, json_garbage)]
        try:
            finished = [(process.communicate(timeout=120)[1], process) for process in running]
        finally:
            for process in running:
                process.kill()  # only one still running after a timeout; a no-op for the others
    for stderr, done in finished:
        assert done.returncode == EXIT_CLUSTER, stderr
        assert "Traceback" not in stderr
        assert stderr.strip().startswith("vpipe: error:") and "created job" not in stderr, stderr


def test_a_missing_default_kubeconfig_says_it_does_not_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["status", "mnist"]) == EXIT_CLUSTER
    err = capsys.readouterr().err
    assert "does not exist" in err and str(tmp_path / ".kube" / "config") in err, err
    assert "Invalid kube-config" not in err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "a") + os.pathsep + str(tmp_path / "b"))
    assert main(["status", "mnist"]) == EXIT_CLUSTER
    err = capsys.readouterr().err
    assert "$KUBECONFIG names" in err and "does not exist" in err, err


def test_a_bad_request_timeout_setting_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv(REQUEST_TIMEOUT_ENV, "nan")
    with serve("silent") as server:
        assert main(["status", "mnist", "--kubeconfig", server.kubeconfig(tmp_path)]) == 2
    assert REQUEST_TIMEOUT_ENV in capsys.readouterr().err


# ---------------------------------------------------------------------------- round three (issue 33)


@pytest.mark.parametrize("command", ["tensorboard", "serve", "pv-reuse", "namespace-prepare", "status"])
def test_a_plain_web_servers_404_page_is_not_a_missing_object(command: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """Item 3: any web server answers 404 with HTML for a path it lacks; that is the wrong server
    (exit 3), not a PVC / PV / secret the user named wrongly (exit 2)."""
    with serve("html-404") as server:
        code, err, logged = run(COMMANDS[command], server.kubeconfig(tmp_path), capsys, caplog)
    assert code == EXIT_CLUSTER, err
    assert "not answering like a Kubernetes API server" in err and "HTTP 404" in err, err
    assert "invalid" not in err
    assert len(server.requests) == 1, server.requests  # asked once: the same page every time


def test_an_https_address_at_a_plain_http_port_is_reported_at_once(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   caplog: pytest.LogCaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 10: a TLS handshake with a server that does not speak TLS fails the same way every
    time: no retries (before: 17 s of them), and our sentence instead of urllib3's repr."""
    pauses: list[float] = []
    real_call = retry.call
    monkeypatch.setattr(retry, "call", lambda *a, **k: real_call(*a, **{**k, "sleep": pauses.append}))
    with serve("html") as server:
        server.url = server.url.replace("http://", "https://")
        code, err, _ = run(COMMANDS["status"], server.kubeconfig(tmp_path), capsys, caplog)
    assert code == EXIT_CLUSTER
    assert pauses == []
    assert "does not speak TLS" in err and server.url in err, err
    assert "HTTPSConnectionPool" not in err and "Max retries" not in err


def test_a_certificate_that_does_not_verify_is_not_retried(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    real_call = retry.call
    monkeypatch.setattr(retry, "call", lambda *a, **k: real_call(*a, **{**k, "sleep": pauses.append}))
    with serve("json", tls_dir=tmp_path) as server:
        server.ca_file = None  # the system's CAs: the self-signed certificate does not verify
        code, err, _ = run(COMMANDS["status"], server.kubeconfig(tmp_path), capsys, caplog)
    assert code == EXIT_CLUSTER
    assert pauses == [] and "does not verify" in err, err
