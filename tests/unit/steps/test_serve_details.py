"""serve() and its helpers, the parts test_serve_flow's scenarios leave open (found by
scripts/mutation on steps/_serve.py): which versions count as "the new one" for each version
policy, what is applied and reported, pruning only after a good rollout, the fetch paths (the
given URL, in-cluster, the API server's proxy), the AVAILABLE wait's handling of odd answers
and its deadline, and the checks that refuse bad input before anything is contacted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.serving import Clock, DONE, FAILED, FakeApps, Notes, _export, previous_deployment
from tests.unit.objects.tfserving_standin import standin, status_body
from volcano_pipelines.errors import InputError
from volcano_pipelines.k8s import apps
from volcano_pipelines.k8s import client as k8s_client
from volcano_pipelines.objects.rollout import Rollout
from volcano_pipelines.objects.serving import REST_PORT
from volcano_pipelines.steps import Connection, ObjectLabels
from volcano_pipelines.steps import _serve as serving
from volcano_pipelines.steps._serve import (
    _direct_fetch,
    _in_cluster_url,
    _payload,
    _proxy_fetch,
    local_listing,
    serve,
    smoke_test,
    wait_model_available,
)


# ----- what is applied and reported -------------------------------------------------------------

def test_a_new_deployment_reports_its_endpoints_and_owns_its_service(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api: FakeApps = fake(None, [DONE])
    notes = Notes()
    with standin("mnist", [(200, status_body((1, "AVAILABLE"), (2, "AVAILABLE")))]) as tfs:
        result = serve("model", pvc="logs", model_name="mnist", rest_url=tfs.url, model_dir_local=str(export),
                       timeout=30, progress=notes)
    assert result.succeeded and result.created and result.namespace == "ns" and result.target == "deployment"
    assert result.rest_endpoint == f"http://model.ns.svc:{REST_PORT}/v1/models/mnist"
    assert result.grpc_endpoint.startswith("model.ns.svc:") and result.grpc_endpoint != result.rest_endpoint
    assert result.message == f"model mnist version 2 AVAILABLE at {result.rest_endpoint}"
    assert result.smoke_test is None and result.pruned == [] and result.manifests is None
    assert ("get", "PersistentVolumeClaim", "ns", "logs") in api.calls
    [deployment] = [o for o in api.applied if o["kind"] == "Deployment"]
    assert deployment["metadata"]["namespace"] == "ns"
    assert deployment["spec"]["progressDeadlineSeconds"] == 60  # at least a minute, even for timeout=30
    others = [o for o in api.applied if o["kind"] != "Deployment"]
    assert others and all(o["metadata"]["ownerReferences"][0]["uid"] == "uid-Deployment" for o in others)
    assert api.calls.index(("apply", "Deployment", "model")) < api.calls.index(("apply", "Service", "model"))
    assert api.rollout_kwargs[0]["namespace"] == "ns" and api.rollout_kwargs[0]["timeout"] == 30
    assert any(line.startswith("serve ns/model: created (model mnist, export/mnist on logs)") for line in notes.lines)
    assert any("model mnist:" in line for line in notes.lines)  # the status wait reports through progress


def test_an_update_says_updated_and_is_not_created(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    fake(previous_deployment(), [DONE])
    notes = Notes()
    with standin("model", [(200, status_body((2, "AVAILABLE")))]) as tfs:
        result = serve("model", pvc="logs", rest_url=tfs.url, model_dir_local=str(export), timeout=5,
                       namespace="other", progress=notes)
    assert result.succeeded and not result.created and not result.rolled_back and result.namespace == "other"
    assert any(line.startswith("serve other/model: updated") for line in notes.lines)


def test_a_missing_pvc_is_refused_before_anything_is_applied(fake) -> None:  # type: ignore[no-untyped-def]
    api: FakeApps = fake(None, [DONE])
    api.pvc_exists = False
    with pytest.raises(InputError) as err:
        serve("model", pvc="logs", rest_url="http://127.0.0.1:9", timeout=1)
    assert err.value.field == "pvc" and api.applied == []


def test_the_progress_deadline_follows_a_long_timeout(tmp_path: Path) -> None:
    result = serve("model", pvc="logs", timeout=900, dry_run=True)
    [deployment] = [m for m in result.manifests or [] if m["kind"] == "Deployment"]
    assert deployment["spec"]["progressDeadlineSeconds"] == 900


# ----- which version is "the new one" -----------------------------------------------------------

@pytest.mark.parametrize("policy, versions, states, ready", [
    ("latest", None, ((1, "LOADING"), (2, "AVAILABLE")), True),   # the newest exported one is up
    ("latest", None, ((1, "AVAILABLE"), (2, "LOADING")), False),
    ("all", None, ((1, "LOADING"), (2, "AVAILABLE")), False),     # every exported one must be up
    ("all", None, ((1, "AVAILABLE"), (2, "AVAILABLE")), True),
    ("specific", [1], ((1, "AVAILABLE"), (2, "LOADING")), True),  # only the named one
    ("specific", [2], ((1, "AVAILABLE"), (2, "LOADING")), False),
])
def test_each_version_policy_waits_for_its_own_versions(fake, export: Path, policy: str, versions: list[int] | None,  # type: ignore[no-untyped-def]
                                                         states: tuple[tuple[int, str], ...], ready: bool) -> None:
    fake(None, [DONE])
    with standin("model", [(200, status_body(*states))]) as tfs:
        result = serve("model", pvc="logs", rest_url=tfs.url, model_dir_local=str(export), version_policy=policy,  # type: ignore[arg-type]
                       versions=versions, timeout=0.3)
    assert result.succeeded is ready, result.message


def test_an_exported_version_named_that_is_missing_is_refused(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError) as err:
        serve("model", pvc="logs", model_dir_local=str(export), version_policy="specific", versions=[1, 5], dry_run=True)
    assert err.value.field == "versions" and err.value.value == [5]


# ----- pruning and the smoke test ---------------------------------------------------------------

def test_keep_versions_prunes_after_a_good_rollout_never_a_served_version(fake, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = _export(tmp_path / "m", "1", "2", "3", "4")
    fake(None, [DONE])
    with standin("model", [(200, status_body((2, "AVAILABLE"), (4, "AVAILABLE")))]) as tfs:
        result = serve("model", pvc="logs", rest_url=tfs.url, model_dir_local=str(model), keep_versions=1,
                       version_policy="specific", versions=[2, 4], timeout=5)
    assert result.succeeded and result.pruned == [1, 3], result.message
    assert sorted(p.name for p in model.iterdir()) == ["2", "4"]


def test_nothing_is_pruned_when_the_rollout_fails(fake, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model = _export(tmp_path / "m", "1", "2", "3")
    fake(previous_deployment(), [FAILED, DONE])
    with standin("model", [(200, status_body((3, "AVAILABLE")))]) as tfs:
        result = serve("model", pvc="logs", rest_url=tfs.url, model_dir_local=str(model), keep_versions=1, timeout=5)
    assert not result.succeeded and result.pruned == []
    assert sorted(p.name for p in model.iterdir()) == ["1", "2", "3"]


def test_no_smoke_test_when_the_model_never_comes_up(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    fake(None, [DONE])
    with standin("model", [(200, status_body((2, "LOADING")))]) as tfs:
        result = serve("model", pvc="logs", rest_url=tfs.url, model_dir_local=str(export),
                       smoke_payload='{"instances": [[1.0]]}', timeout=0.3)
    assert not result.succeeded and result.smoke_test is None
    assert not any(r[0] == "POST" for r in tfs.requests)


def test_a_rollback_that_does_not_come_up_says_so(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    api: FakeApps = fake(previous_deployment(), [FAILED, Rollout(False, False, "1 of 1 updated replicas available")])
    with standin("model", [(200, status_body((2, "AVAILABLE")))]) as tfs:
        result = serve("model", pvc="logs", rest_url=tfs.url, model_dir_local=str(export), timeout=5)
    assert result.rolled_back and not result.succeeded
    assert (result.message or "").endswith("which is not ready yet: 1 of 1 updated replicas available")
    assert api.rollout_kwargs[-1]["timeout"] == serving.ROLLBACK_WAIT_SECONDS


@pytest.mark.parametrize("answer, ok, detail", [
    ((200, {"predictions": [[1]]}), True, "predictions returned"),
    ((200, {"outputs": [[1]]}), True, "predictions returned"),
    ((200, {"model": "x"}), False, '{"model": "x"}'),  # 200 without predictions is no prediction
    ((500, {"error": "OOM"}), False, "OOM"),
    ((200, ["predictions"]), False, '["predictions"]'),
])
def test_smoke_test_answers(answer: tuple[int, Any], ok: bool, detail: str) -> None:
    result = smoke_test(lambda *_: (answer[0], json.dumps(answer[1])), "m", {"instances": []})
    assert result == {"status": answer[0], "ok": ok, "detail": detail}


def test_smoke_test_without_a_json_answer() -> None:
    assert smoke_test(lambda *_: (502, "<html>bad gateway</html>"), "m", {})["detail"] == "<html>bad gateway</html>"
    assert smoke_test(lambda *_: (0, ""), "m", {}) == {"status": 0, "ok": False, "detail": "no answer"}
    assert len(smoke_test(lambda *_: (502, "x" * 1000), "m", {})["detail"]) == 300


# ----- the AVAILABLE wait -----------------------------------------------------------------------


def test_the_wait_reports_each_change_once_and_sleeps_no_longer_than_the_deadline() -> None:
    answers = iter([(200, json.dumps(status_body((1, "LOADING"))))] * 3 + [(200, json.dumps(status_body((1, "AVAILABLE"))))])
    clock = Clock()
    seen: list[str] = []
    asked: list[tuple[str, str, Any]] = []

    def fetch(method: str, path: str, body: Any) -> tuple[int, str]:
        asked.append((method, path, body))
        return next(answers)

    state = wait_model_available(fetch, "m", [1], 10, clock=clock, sleep=clock.sleep, interval=3, on_change=seen.append)
    assert state.ready and asked[0] == ("GET", "v1/models/m", None) and len(asked) == 4
    assert len(seen) == 2 and seen[0].startswith("model m: ") and "LOADING" in seen[0]
    assert clock.sleeps == [3, 3, 3]
    clock = Clock()
    late = wait_model_available(lambda *_: (200, json.dumps(status_body((1, "LOADING")))), "m", [1], 5,
                                clock=clock, sleep=clock.sleep, interval=3)
    assert clock.sleeps == [3, 2] and late.failed and not late.ready
    assert late.message.startswith("not AVAILABLE after 5s: ")


@pytest.mark.parametrize("status, text, word", [
    (0, "connection refused", "no answer (HTTP 0): connection refused"),
    (503, '["upstream down"]', "no answer (HTTP 503): [\"upstream down\"]"),  # a 5xx whose JSON is no status
    (503, "<html>upstream down</html>", "HTTP 503: <html>upstream down</html>"),
    (404, "not json", "HTTP 404: not json"),
])
def test_odd_status_answers_are_waited_through_and_named(status: int, text: str, word: str) -> None:
    clock = Clock()
    seen: list[str] = []
    state = wait_model_available(lambda *_: (status, text), "m", None, 4, clock=clock, sleep=clock.sleep, interval=2,
                                 on_change=seen.append)
    assert not state.ready and state.failed and word in state.message, state.message
    assert len(seen) == 1 and clock.now == 104.0


def test_an_empty_answer_is_not_available() -> None:
    clock = Clock()
    state = wait_model_available(lambda *_: (200, ""), "m", None, 1, clock=clock, sleep=clock.sleep)
    assert not state.ready and state.failed


# ----- how TF Serving is reached ----------------------------------------------------------------

def test_in_cluster_url_only_inside_a_pod_without_an_explicit_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert _in_cluster_url("m", "ns", Connection()) is None
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert _in_cluster_url("m", "ns", Connection()) == f"http://m.ns.svc:{REST_PORT}"
    assert _in_cluster_url("m", "ns", Connection(kubeconfig="/kubeconfig")) is None
    assert _in_cluster_url("m", "ns", Connection(context="ctx")) is None


def test_without_a_url_outside_a_cluster_the_api_servers_proxy_is_used(fake, export: Path,  # type: ignore[no-untyped-def]
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    fake(None, [DONE])
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    asked: list[tuple[Any, ...]] = []

    def proxy(cluster: Any, ns: str, service: str, port: int, path: str, *, method: str = "GET",
              body: Any = None) -> tuple[int, str]:
        asked.append((ns, service, port, path, method, body))
        return (200, json.dumps(status_body((2, "AVAILABLE"))) if method == "GET" else json.dumps({"predictions": [1]}))

    monkeypatch.setattr(apps, "proxy_request", proxy)
    result = serve("model", pvc="logs", model_dir_local=str(export), smoke_payload='{"instances": [1]}', timeout=5)
    assert result.succeeded, result.message
    assert asked == [("ns", "model", REST_PORT, "v1/models/model", "GET", None),
                     ("ns", "model", REST_PORT, "v1/models/model:predict", "POST", {"instances": [1]})]


def test_inside_a_pod_the_service_is_asked_directly(fake, export: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    fake(None, [DONE])
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setattr(apps, "proxy_request", lambda *a, **k: pytest.fail("the proxy was used inside a pod"))
    with standin("model", [(200, status_body((2, "AVAILABLE")))]) as tfs:
        monkeypatch.setattr(serving, "_in_cluster_url", lambda name, ns, connection: tfs.url + "/")
        result = serve("model", pvc="logs", model_dir_local=str(export), timeout=5)
    assert result.succeeded and tfs.requests == [("GET", "/v1/models/model", None)], result.message


def test_proxy_fetch_passes_the_request_through(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(apps, "proxy_request", lambda *a, **k: seen.append((a, k)) or (201, "ok"))
    cluster = object()
    assert _proxy_fetch(cluster, "ns", "svc")("POST", "v1/x", {"a": 1}) == (201, "ok")
    assert seen == [((cluster, "ns", "svc", REST_PORT, "v1/x"), {"method": "POST", "body": {"a": 1}})]


def test_direct_fetch_returns_error_answers_and_unreachable_as_status_0() -> None:
    with standin("m", [(503, {"error": "loading"})], predict=(400, {"error": "bad"})) as tfs:
        fetch = _direct_fetch(tfs.url + "/")
        status, text = fetch("GET", "v1/models/m", None)
        assert status == 503 and json.loads(text) == {"error": "loading"}
        assert fetch("POST", "v1/models/m:predict", {"x": [1]})[0] == 400
    assert tfs.requests == [("GET", "/v1/models/m", None), ("POST", "/v1/models/m:predict", {"x": [1]})]
    status, text = _direct_fetch("http://127.0.0.1:9")("GET", "v1/models/m", None)
    assert status == 0 and text


def test_local_listing_reads_one_level_and_does_not_follow_links(tmp_path: Path) -> None:
    (tmp_path / "2" / "variables").mkdir(parents=True)
    (tmp_path / "2" / "saved_model.pb").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "1").symlink_to(tmp_path / "2")
    assert local_listing(str(tmp_path)) == {"2": ["saved_model.pb", "variables"], "notes.txt": None, "1": None}
    assert local_listing(str(tmp_path / "notes.txt")) is None


# ----- input refused before any cluster is contacted ---------------------------------------------

@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s_client, "connect", lambda *_a, **_k: pytest.fail("a cluster was contacted"))


@pytest.mark.parametrize("kwargs, field, value", [
    ({"model_path": "/etc"}, "model_path", "/etc"),
    ({"model_name": "-bad"}, "model_name", "-bad"),
    ({"model_name": "x" * 201}, "model_name", "x" * 201),
    ({"namespace": "Bad_NS"}, "namespace", "Bad_NS"),
    ({"memory": "lots"}, "memory", "lots"),
    ({"object_labels": ObjectLabels(labels={"bad key!": "x"})}, "labels['bad key!']", "bad key!"),
    ({"object_labels": ObjectLabels(run_id="bad id!")}, "run_id", "bad id!"),
    ({"image_pull_secrets": ["Bad_Secret"]}, "image_pull_secrets", "Bad_Secret"),
    ({"timeout": 0}, "timeout", 0),
    ({"replicas": 101}, "replicas", 101),
    ({"gpus": -1}, "gpus", -1),
    ({"gpus": 17}, "gpus", 17),
    ({"target": "knative"}, "target", "knative"),
    ({"version_policy": "newest"}, "version_policy", "newest"),
    ({"versions": [True], "version_policy": "specific"}, "versions", [True]),
    ({"versions": ["1"], "version_policy": "specific"}, "versions", ["1"]),
    ({"versions": [3, -1], "version_policy": "specific"}, "versions", [3, -1]),
    ({"versions": [], "version_policy": "specific"}, "versions", []),
    ({"version_policy": "specific"}, "versions", None),
    ({"versions": [1], "version_policy": "all"}, "versions", [1]),
    ({"smoke_payload": '{"instances": NaN}'}, "smoke_payload", '{"instances": NaN}'),
    ({"smoke_payload": "[1]"}, "smoke_payload", "[1]"),
    ({"keep_versions": 0, "model_dir_local": "/nonexistent"}, "keep_versions", 0),
    ({"keep_versions": 10_001, "model_dir_local": "/nonexistent"}, "keep_versions", 10_001),
    ({"keep_versions": 2}, "keep_versions", 2),
    ({"rest_url": "ftp://x"}, "rest_url", "ftp://x"),
    ({"target": "kserve", "smoke_payload": "{}"}, "smoke_payload", "{}"),
    ({"target": "kserve", "keep_versions": 1, "model_dir_local": "/m"}, "keep_versions", 1),
    ({"target": "kserve", "rest_url": "http://x"}, "rest_url", "http://x"),
    ({"target": "kserve", "version_policy": "all"}, "version_policy", "all"),
    ({"model_dir_local": "/nonexistent/model"}, "model_dir_local", "/nonexistent/model"),
])
def test_bad_input_is_refused_naming_the_argument_and_its_value(no_cluster: None, kwargs: dict[str, Any], field: str,
                                                                 value: Any) -> None:
    with pytest.raises(InputError) as err:
        serve("model", pvc="logs", **kwargs)
    assert (err.value.field, err.value.value) == (field, value)
    assert isinstance(err.value.allowed, str) and err.value.allowed  # what would be taken, for the error line


def test_a_model_directory_that_is_no_export_is_refused_saying_what_is_wrong(no_cluster: None, tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        serve("model", pvc="logs", model_dir_local=str(tmp_path), dry_run=True)
    assert err.value.field == "model_dir_local"
    assert f"{tmp_path} has no version directories" in err.value.allowed


def test_good_edge_values_pass(no_cluster: None) -> None:
    for kwargs in ({"replicas": 100}, {"gpus": 16}, {"gpus": 0}, {"model_name": "A" + "x" * 199}, {"model_name": "9.a_b-c"},
                   {"versions": [0], "version_policy": "specific"}, {"model_path": "export/mnist/"}):
        assert serve("model", pvc="logs", dry_run=True, **kwargs).succeeded, kwargs


def test_payload_parsing() -> None:
    assert _payload(None) is None
    assert _payload('{"instances": [[1.0]]}') == {"instances": [[1.0]]}
    for bad in ("Infinity", '{"a": -Infinity}', "null", "{"):
        with pytest.raises(InputError):
            _payload(bad)


def test_dry_run_and_kserve_describe_what_they_render(no_cluster: None) -> None:
    dry = serve("model", pvc="logs", dry_run=True, model_name="mnist")
    assert dry.succeeded and dry.namespace == "default" and dry.message == "dry run: nothing was created"
    assert [m["kind"] for m in dry.manifests or []] == ["Deployment", "Service"]
    assert "export/mnist" in json.dumps(dry.manifests) and "manifests" in dry.to_dict()
    kserve = serve("model", pvc="logs", target="kserve", namespace="ml")
    assert kserve.succeeded and kserve.target == "kserve" and kserve.namespace == "ml"
    assert [m["kind"] for m in kserve.manifests or []] == ["InferenceService"]
    assert kserve.message == "rendered a KServe InferenceService; nothing was applied"


def test_a_rollback_says_so_and_waits_for_the_old_template_even_without_a_hash(fake, export: Path) -> None:  # type: ignore[no-untyped-def]
    previous = previous_deployment()
    del previous["spec"]["template"]["metadata"]["annotations"]  # applied by something else: no hash of ours
    api: FakeApps = fake(previous, [FAILED, DONE])
    notes = Notes()
    with standin("model", [(200, status_body((2, "AVAILABLE")))]) as tfs:
        result = serve("model", pvc="logs", rest_url=tfs.url, model_dir_local=str(export), timeout=5, progress=notes)
    assert result.rolled_back and api.calls[-1] == ("wait", "")
    assert "serve ns/model: rolling back to the previous revision" in notes.lines
    assert "manifests" not in result.to_dict() and result.to_dict()["rolled_back"] is True


def test_prune_skips_files_and_links_inside_the_model_directory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = _export(tmp_path / "m", "3", "4")
    (model / "1").write_text("a file named like a version")
    (model / "copy").mkdir()
    (model / "2").symlink_to(model / "copy")  # a link to a directory inside the model directory
    names = {1: "1", 2: "2", 3: "3", 4: "4"}
    with caplog.at_level("WARNING"):
        assert serving._prune(str(model), names, keep=1, served=[4]) == [3]
    assert (model / "1").is_file() and (model / "copy").is_dir() and (model / "2").is_symlink()
    assert not (model / "3").exists() and (model / "4").is_dir()
    assert f"not pruning {model / '1'}: not a version directory inside {model}" in caplog.text
    assert f"not pruning {model / '2'}" in caplog.text


def test_a_non_json_constant_is_named() -> None:
    with pytest.raises(InputError) as err:
        _payload('{"instances": [NaN]}')
    assert "NaN is not JSON" in str(err.value)
