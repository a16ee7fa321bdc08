"""serve(): what test_serve_flow and test_serve_details leave open (scripts/mutation survivors
on steps/_serve.py): every option reaches the rendered objects, every cluster call goes to the
cluster connect() returned for the given kubeconfig/context, the rollout waits (forward and
back) watch this Deployment's pods and report progress, the model wait gets what is left of the
timeout, layout warnings reach the result and the log, and the direct REST fetch's edges
(no body on GET, JSON content type, bounded time, undecodable answers, why a server is
unreachable)."""

from __future__ import annotations

import http.server
import json
import os
import types
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.http_server import running
from tests.helpers.serving import Clock, DONE, FAILED, FakeApps, Notes, _export, previous_deployment
from tests.unit.objects.tfserving_standin import standin, status_body
from volcano_pipelines.k8s import apps
from volcano_pipelines.objects.serving import REST_PORT, selector
from volcano_pipelines.lifecycle.tfserving import ModelStatus
from volcano_pipelines.steps import Connection, ObjectLabels
from volcano_pipelines.steps import _serve as serving
from volcano_pipelines.steps._serve import _direct_fetch, local_listing, serve, wait_model_available


def _deployment(manifests: list[dict[str, Any]] | None) -> dict[str, Any]:
    [deployment] = [m for m in manifests or [] if m["kind"] == "Deployment"]
    return deployment


# ----- what is rendered -------------------------------------------------------------------------

def test_every_option_reaches_the_rendered_objects() -> None:
    result = serve("model", pvc="logs", model_name="mnist", model_path="models/mnist", image="reg.example/tfs:1",
                   replicas=3, cpu="2", memory="3Gi", gpus=1, version_policy="specific", versions=[4, 2],
                   object_labels=ObjectLabels(run_id="run-7", labels={"team": "ml"}), image_pull_secrets=["regcred"], namespace="ml",
                   timeout=900, dry_run=True)
    assert (result.name, result.model_name, result.namespace) == ("model", "mnist", "ml")
    deployment = _deployment(result.manifests)
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert deployment["spec"]["replicas"] == 3 and deployment["spec"]["progressDeadlineSeconds"] == 900
    assert container["image"] == "reg.example/tfs:1"
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "3Gi", "nvidia.com/gpu": "1"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v] == ["logs"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v1/models/mnist"
    for obj in result.manifests or []:
        assert obj["metadata"]["namespace"] == "ml"
        assert obj["metadata"]["labels"]["team"] == "ml" and obj["metadata"]["labels"]["volcano-pipelines/run"] == "run-7"
    [config] = [m for m in result.manifests or [] if m["kind"] == "ConfigMap"]
    text = config["data"]["models.config"]
    assert 'name: "mnist"' in text and "/models/models/mnist" in text and "versions: 4 versions: 2" in text


def test_the_defaults_one_small_replica_no_gpu_ten_minutes() -> None:
    deployment = _deployment(serve("model", pvc="logs", dry_run=True).manifests)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["progressDeadlineSeconds"] == 600
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert "nvidia.com/gpu" not in container["resources"]["requests"] and not container["image"].endswith("-gpu")


def test_layout_warnings_reach_every_result_and_the_log(fake, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        caplog: pytest.LogCaptureFixture) -> None:
    model = _export(tmp_path / "m", "1", "2")
    (model / "notes").mkdir()  # not a version: TF Serving ignores it, the step says so
    warning = f"{model} also holds notes: not numbered, ignored by TF Serving"
    with caplog.at_level("WARNING"):
        dry = serve("model", pvc="logs", model_dir_local=str(model), dry_run=True)
    assert dry.warnings == [warning] and caplog.messages == [warning]
    kserve = serve("model", pvc="logs", model_dir_local=str(model), target="kserve")
    assert kserve.warnings == [warning] and (kserve.name, kserve.model_name) == ("model", "model")
    fake(None, [DONE])
    with standin("model", [(200, status_body((2, "AVAILABLE")))]) as tfs:
        served = serve("model", pvc="logs", model_dir_local=str(model), rest_url=tfs.url, timeout=5)
    assert served.succeeded and served.warnings == [warning] and served.version == 2, served.message


# ----- the cluster calls ------------------------------------------------------------------------

def test_every_call_goes_to_the_cluster_of_the_given_config(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api: FakeApps = fake(None, [DONE])
    notes = Notes()
    with standin("mnist", [(200, status_body((2, "AVAILABLE")))]) as tfs:
        result = serve("model", pvc="logs", model_name="mnist", rest_url=tfs.url, model_dir_local=str(export),
                       connection=Connection("/home/me/kubeconfig", "lab"), timeout=5, progress=notes)
    assert result.succeeded and (result.name, result.model_name) == ("model", "mnist"), result.message
    assert api.connected == [("/home/me/kubeconfig", "lab")]
    assert ("get", "PersistentVolumeClaim", "ns", "logs") in api.calls and ("get", "Deployment", "ns", "model") in api.calls
    assert sorted(o["kind"] for o in api.checked) == ["Deployment", "Service"]  # validated before applying
    assert api.calls.index(("get", "Deployment", "ns", "model")) < api.calls.index(("apply", "Deployment", "model"))
    [wait] = api.rollout_kwargs
    assert (wait["namespace"], wait["name"], wait["selector"]) == ("ns", "model", selector("model"))
    assert any(line.startswith("deployment ns/model: rollout of ") for line in notes.lines)  # the watch's own lines


def test_the_rollback_waits_on_the_same_deployment_and_reports(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api: FakeApps = fake(previous_deployment(), [FAILED, DONE])
    notes = Notes()
    result = serve("model", pvc="logs", rest_url="http://127.0.0.1:9", model_dir_local=str(export), timeout=5,
                   progress=notes)
    assert result.rolled_back and not result.succeeded
    back = api.rollout_kwargs[-1]
    assert (back["namespace"], back["name"], back["selector"]) == ("ns", "model", selector("model"))
    assert "deployment ns/model: rollout of old-hash under way" in notes.lines


def test_the_api_servers_proxy_is_asked_on_the_connected_cluster(fake, export: Path,  # type: ignore[no-untyped-def]
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    api: FakeApps = fake(None, [DONE])
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    clusters: list[Any] = []

    def proxy(cluster: Any, *_a: Any, **_k: Any) -> tuple[int, str]:
        clusters.append(cluster)
        return 200, json.dumps(status_body((2, "AVAILABLE")))

    monkeypatch.setattr(apps, "proxy_request", proxy)
    assert serve("model", pvc="logs", model_dir_local=str(export), timeout=5).succeeded
    assert clusters and all(c is api.cluster for c in clusters)


@pytest.mark.parametrize("config, direct", [
    ({}, f"http://model.ns.svc:{REST_PORT}"),  # inside a pod: the Service itself
    ({"kubeconfig": "/kubeconfig"}, None),  # an explicit config: the API server's proxy
    ({"context": "lab"}, None),
])
def test_inside_a_pod_the_url_is_the_services_unless_a_config_is_given(fake, export: Path,  # type: ignore[no-untyped-def]
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       config: dict[str, str], direct: str | None) -> None:
    fake(None, [DONE])
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    bases: list[str] = []
    answer = (200, json.dumps(status_body((2, "AVAILABLE"))))
    monkeypatch.setattr(serving, "_direct_fetch", lambda base: bases.append(base) or (lambda *_: answer))
    monkeypatch.setattr(apps, "proxy_request", lambda *_a, **_k: answer)
    assert serve("model", pvc="logs", model_dir_local=str(export), timeout=5, connection=Connection(**config)).succeeded
    assert bases == ([direct] if direct else [])


@pytest.mark.parametrize("rollout_seconds, left", [(12.0, 18.0), (29.5, 1.0)])
def test_the_model_wait_gets_what_the_rollout_left_of_the_timeout(fake, export: Path,  # type: ignore[no-untyped-def]
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  rollout_seconds: float, left: float) -> None:
    """timeout covers the rollout and the model together; at least a second is left to ask."""
    api: FakeApps = fake(None, [DONE])
    now = [1000.0]
    monkeypatch.setattr(serving, "time", types.SimpleNamespace(monotonic=lambda: now[0]))

    def rollout(*a: Any, **k: Any) -> Any:
        now[0] += rollout_seconds
        return FakeApps.wait_for_rollout(api, *a, **k)

    monkeypatch.setattr(apps, "wait_for_rollout", rollout)
    budgets: list[float] = []

    def wait(_fetch: Any, _model: str, _want: Any, timeout: float, **_: Any) -> ModelStatus:
        budgets.append(timeout)
        return ModelStatus(True, False, (2,), "version(s) 2 AVAILABLE")

    monkeypatch.setattr(serving, "wait_model_available", wait)
    assert serve("model", pvc="logs", model_dir_local=str(export), rest_url="http://127.0.0.1:9", timeout=30).succeeded
    assert budgets == [left]


# ----- the AVAILABLE wait's edges ---------------------------------------------------------------

def test_an_empty_answer_is_no_version_loaded_yet() -> None:
    clock = Clock()
    state = wait_model_available(lambda *_: (200, ""), "m", None, 1, clock=clock, sleep=clock.sleep)
    assert state.message == "not AVAILABLE after 1s: no version loaded yet"
    assert state.ready is False and state.failed is True


@pytest.mark.parametrize("status, named", [(500, True), (501, True), (499, False)])
def test_a_server_error_whose_json_is_no_status_is_no_answer(status: int, named: bool) -> None:
    clock = Clock()
    state = wait_model_available(lambda *_: (status, '"busy"'), "m", None, 1, clock=clock, sleep=clock.sleep)
    assert (f"no answer (HTTP {status}): \"busy\"" in state.message) is named, state.message


def test_the_last_sleep_ends_at_the_deadline_even_under_a_second() -> None:
    clock = Clock()
    wait_model_available(lambda *_: (200, json.dumps(status_body((1, "LOADING")))), "m", [1], 4.5,
                         clock=clock, sleep=clock.sleep, interval=2)
    assert clock.sleeps == [2, 2, 0.5] and clock.now == 104.5


def test_an_unreadable_version_directory_is_a_directory_without_files(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model = _export(tmp_path / "m", "1", "2")
    real_listdir = os.listdir

    def listdir(path: Any) -> list[str]:
        if str(path).endswith("/2"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(serving.os, "listdir", listdir)
    assert local_listing(str(model)) == {"1": ["saved_model.pb", "variables"], "2": []}


# ----- the direct REST fetch --------------------------------------------------------------------

class _Recorder(http.server.BaseHTTPRequestHandler):
    """Records method, path, content type and body; answers `answer` (status, raw bytes)."""

    seen: list[tuple[str, str, str | None, bytes]]  # (request line, path, content type, body)
    answer: tuple[int, bytes]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        # The request line as sent: http.server itself folds a leading "//" in self.path into "/".
        self.seen.append((self.requestline, self.path, self.headers.get("Content-Type"), body))
        status, data = self.answer
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _handle


def _recorder(status: int, data: bytes) -> tuple[http.server.ThreadingHTTPServer, list[Any]]:
    seen: list[Any] = []
    handler = type("Handler", (_Recorder,), {"seen": seen, "answer": (status, data)})
    return http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler), seen


@pytest.mark.parametrize("slash", ["", "/"])
def test_direct_fetch_sends_json_and_no_body_on_get(slash: str) -> None:
    server, seen = _recorder(200, b"{}")
    with running(server):
        fetch = _direct_fetch(f"http://127.0.0.1:{server.server_address[1]}{slash}")  # --rest-url with or without /
        fetch("GET", "v1/models/m", None)
        fetch("POST", "v1/models/m:predict", {"instances": [1]})
    assert seen[0][0] == "GET /v1/models/m HTTP/1.1" and seen[0][3] == b""
    assert seen[1] == ("POST /v1/models/m:predict HTTP/1.1", "/v1/models/m:predict", "application/json",
                       b'{"instances": [1]}')


@pytest.mark.parametrize("status", [200, 500])
def test_direct_fetch_survives_an_answer_that_is_not_utf8(status: int) -> None:
    server, _ = _recorder(status, b"\xff\xfe garbage")
    with running(server):
        got = _direct_fetch(f"http://127.0.0.1:{server.server_address[1]}")("GET", "v1/models/m", None)
    assert got == (status, "\ufffd\ufffd garbage")


@pytest.mark.parametrize("error, text", [
    (urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")), "[Errno 111] Connection refused"),
    (TimeoutError("timed out"), "timed out"),  # an OSError without a reason: the error itself
])
def test_direct_fetch_says_why_a_server_is_unreachable_within_bounded_time(monkeypatch: pytest.MonkeyPatch,
                                                                           error: Exception, text: str) -> None:
    timeouts: list[Any] = []

    def urlopen(_request: Any, timeout: Any = None) -> Any:
        timeouts.append(timeout)
        raise error

    monkeypatch.setattr(serving.urllib.request, "urlopen", urlopen)
    assert _direct_fetch("http://tfs:8501")("GET", "v1/models/m", None) == (0, text)
    assert timeouts and timeouts[0] is not None and 0 < timeouts[0] <= 10  # a server that never answers cannot hang the step
