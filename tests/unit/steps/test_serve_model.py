"""TF Serving's side of the serve step without a cluster: the model status format TF Serving
documents, the export layout it needs, bounded pruning, the AVAILABLE wait and the smoke test
against a stand-in REST server (the TF Serving binary cannot run here), and rollout reading."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.clock import VirtualClock
from tests.unit.objects.tfserving_standin import standin, status_body
from volcano_pipelines.cli import main
from volcano_pipelines.objects.rollout import (
    new_pod_problem,
    rollout_status,
    stamp_template,
    template_hash,
)
from volcano_pipelines.lifecycle.tfserving import (
    check_export_layout,
    model_readiness,
    parse_model_status,
    versions_to_prune,
)
from volcano_pipelines.steps import Connection
from volcano_pipelines.steps._serve import (
    _direct_fetch,
    _prune,
    local_listing,
    serve,
    smoke_test,
    wait_model_available,
)

# The example answers of TF Serving's REST API documentation ("Model status API").
DOC_AVAILABLE = {"model_version_status": [{"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}
DOC_LOADING = {"model_version_status": [{"version": "2", "state": "LOADING", "status": {"error_code": "OK", "error_message": ""}},
                                        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}
DOC_FAILED = {"model_version_status": [{"version": "3", "state": "END", "status": {
    "error_code": "NOT_FOUND", "error_message": "Could not find meta graph def matching supplied tags: { serve }"}}]}
NO_VERSIONS = {"error": "Servable not found for request: Latest(mnist)"}


def test_parse_the_documented_format_with_string_or_number_versions() -> None:
    [v] = parse_model_status(DOC_AVAILABLE)
    assert (v.version, v.state, v.error) == (1, "AVAILABLE", None)
    assert [x.version for x in parse_model_status({"model_version_status": [{"version": 7, "state": "START"}]})] == [7]
    [bad] = parse_model_status(DOC_FAILED)
    assert bad.error == "NOT_FOUND: Could not find meta graph def matching supplied tags: { serve }"
    assert parse_model_status(NO_VERSIONS) == []
    for broken in ([], {"model_version_status": {}}, {"model_version_status": [{"version": "x"}]}, {"model_version_status": [1]}):
        with pytest.raises((TypeError, ValueError)):
            parse_model_status(broken)


def test_readiness_waits_for_the_wanted_version_not_for_http_200() -> None:
    assert model_readiness(DOC_AVAILABLE).ready and model_readiness(DOC_AVAILABLE).served == (1,)
    loading = model_readiness(DOC_LOADING, want=[2])
    assert not loading.ready and not loading.failed and "2: LOADING" in loading.message
    assert model_readiness(DOC_LOADING).ready  # any version: 1 is AVAILABLE
    assert model_readiness(DOC_LOADING, want=[1]).ready
    failed = model_readiness(DOC_FAILED, want=[3])
    assert failed.failed and "version 3 failed to load: NOT_FOUND" in failed.message
    assert model_readiness(DOC_FAILED).failed  # every version ended: no point in waiting
    none = model_readiness(NO_VERSIONS)
    assert not none.ready and not none.failed and "Servable not found" in none.message
    assert not model_readiness(["nonsense"]).ready


def test_export_layout_rules() -> None:
    good = check_export_layout("/m", {"1": ["saved_model.pb", "variables"], "12": ["saved_model.pb"], "tmp-3": []})
    assert good.ok and good.versions == (1, 12) and "tmp-3" in good.warnings[0]
    at_root = check_export_layout("/m", {"saved_model.pb": None, "variables": []})
    assert not at_root.ok and "numbered version" in at_root.problems[0] and "/m/1/" in at_root.problems[0]
    named = check_export_layout("/m", {"v1": ["saved_model.pb"], "latest": ["saved_model.pb"]})
    assert not named.ok and "No versions of servable" in named.problems[0] and "latest, v1" in named.problems[0]
    unfinished = check_export_layout("/m", {"1": ["saved_model.pb"], "2": ["variables"]})
    assert not unfinished.ok and "/m/2 has no saved_model.pb" in unfinished.problems[0]
    assert check_export_layout("/m", {"3": ["saved_model.pbtxt"]}).ok
    assert not check_export_layout("/m", {"7": ["saved_model.pb"], "007": ["saved_model.pb"]}).ok
    assert "does not exist" in check_export_layout("/m", None).problems[0]
    assert not check_export_layout("/m", {}).ok
    assert not check_export_layout("/m", {"-1": ["saved_model.pb"], "1e3": ["saved_model.pb"]}).ok


def test_pruning_is_bounded() -> None:
    assert versions_to_prune([1, 2, 3, 4, 5], keep=2) == [1, 2, 3]
    assert versions_to_prune([1, 2, 3, 4, 5], keep=2, protect=[1]) == [2, 3]  # a served one stays
    assert versions_to_prune([1, 2], keep=5) == []
    assert versions_to_prune([3, 3, 1], keep=1) == [1]
    assert versions_to_prune([1, 2, 3], keep=0) == []  # never everything


def export(root: Path, *versions: str, model_file: bool = True) -> Path:
    for version in versions:
        (root / version / "variables").mkdir(parents=True)
        if model_file:
            (root / version / "saved_model.pb").write_bytes(b"\x08\x01")
    return root


def test_prune_deletes_only_old_numbered_directories(tmp_path: Path) -> None:
    model = export(tmp_path / "mnist", "1", "2", "3", "4")
    (model / "notes").mkdir()
    outside = export(tmp_path / "elsewhere", "9")
    os.symlink(outside / "9", model / "0")  # a link pointing out of the model directory
    names = {int(n): n for n in os.listdir(model) if n.isdigit()}
    assert _prune(str(model), names, keep=2, served=[4]) == [1, 2]
    assert sorted(os.listdir(model)) == ["0", "3", "4", "notes"]
    assert (outside / "9" / "saved_model.pb").exists()  # the link was not followed
    assert local_listing(str(tmp_path / "missing")) is None


def test_wait_model_available_against_the_stand_in() -> None:
    script = [(404, NO_VERSIONS), (200, status_body((2, "START"))), (200, status_body((2, "LOADING"))),
              (200, status_body((2, "AVAILABLE")))]
    clock = VirtualClock()
    seen: list[str] = []
    with standin("mnist", script) as server:
        state = wait_model_available(_direct_fetch(server.url), "mnist", [2], timeout=60, clock=clock, sleep=clock.sleep,
                                     on_change=seen.append)
    assert state.ready and state.served == (2,)
    assert [r[1] for r in server.requests] == ["/v1/models/mnist"] * 4
    assert any("LOADING" in line for line in seen) and clock.now == 6.0  # three 2 s pauses, no real sleep


def test_wait_model_available_fails_on_a_load_error_and_times_out() -> None:
    clock = VirtualClock()
    with standin("m", [(200, status_body((3, "END"), error_code="NOT_FOUND", error_message="bad graph"))]) as server:
        state = wait_model_available(_direct_fetch(server.url), "m", [3], timeout=60, clock=clock, sleep=clock.sleep)
    assert state.failed and "bad graph" in state.message and clock.now == 0
    with standin("m", [(200, status_body((3, "LOADING")))]) as server:
        state = wait_model_available(_direct_fetch(server.url), "m", [3], timeout=10, clock=clock, sleep=clock.sleep)
    assert state.failed and "not AVAILABLE after 10s" in state.message
    nothing = wait_model_available(_direct_fetch("http://127.0.0.1:9"), "m", None, timeout=4, clock=clock, sleep=clock.sleep)
    assert nothing.failed and "no answer" in nothing.message


def test_smoke_test_sends_the_payload() -> None:
    payload = {"instances": [[1.0, 2.0]]}
    with standin("m", [(200, DOC_AVAILABLE)]) as server:
        assert smoke_test(_direct_fetch(server.url), "m", payload) == {"status": 200, "ok": True, "detail": "predictions returned"}
    assert server.requests == [("POST", "/v1/models/m:predict", payload)]
    with standin("m", [(200, DOC_AVAILABLE)], predict=(400, {"error": "Input to reshape is a tensor with 2 values"})) as server:
        result = smoke_test(_direct_fetch(server.url), "m", payload)
    assert not result["ok"] and result["status"] == 400 and "reshape" in result["detail"]


def test_rollout_status_rules() -> None:
    def dep(wanted: int = 2, generation: int = 2, **status: int) -> dict:
        return {"metadata": {"name": "d", "generation": generation}, "spec": {"replicas": wanted},
                "status": {"observedGeneration": 2, **status}}
    assert "controller" in rollout_status(dep(generation=3)).message
    assert "1 of 2 new" in rollout_status(dep(updatedReplicas=1, replicas=3)).message
    assert "1 old replica" in rollout_status(dep(updatedReplicas=2, replicas=3, availableReplicas=2)).message
    assert "1 of 2 updated" in rollout_status(dep(updatedReplicas=2, replicas=2, availableReplicas=1)).message
    done = rollout_status(dep(updatedReplicas=2, replicas=2, availableReplicas=2))
    assert done.done and not done.failed
    stuck = dep()
    stuck["status"]["conditions"] = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                      "message": "too slow"}]
    assert rollout_status(stuck).failed and "too slow" in rollout_status(stuck).message


def test_new_pod_problems_only_count_pods_of_the_new_template() -> None:
    deployment = stamp_template({"spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "c"}]}}}})
    digest = template_hash(deployment)
    assert deployment["spec"]["template"]["metadata"]["annotations"]["volcano-pipelines/template-hash"] == digest
    assert template_hash(deployment) == digest  # the annotation itself is not part of the digest

    def pod(hash_: str, **status: object) -> dict:
        return {"metadata": {"name": f"p-{hash_}", "annotations": {"volcano-pipelines/template-hash": hash_}}, "status": status}
    failed = pod(digest, phase="Failed", containerStatuses=[{"name": "c", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}])
    assert new_pod_problem([failed], digest, "volcano-pipelines/template-hash") == f"pod p-{digest} failed: container c exited with code 3 (Error)"
    assert new_pod_problem([pod("old", phase="Failed")], digest, "volcano-pipelines/template-hash") is None
    crash = pod(digest, phase="Running", containerStatuses=[{"name": "c", "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}])
    assert "CrashLoopBackOff: back-off" in new_pod_problem([crash], digest, "volcano-pipelines/template-hash")
    creating = pod(digest, phase="Pending", containerStatuses=[{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}])
    assert new_pod_problem([creating], digest, "volcano-pipelines/template-hash") is None


# ----- bad input: exit 2, before any cluster is contacted -----------------------------------------

NO_CLUSTER = ["--kubeconfig", "/nonexistent/kubeconfig"]


@pytest.mark.parametrize("argv, flag", [
    (["--name", "Bad_Name", "--pvc", "logs"], "--name"),
    (["--name", "m", "--pvc", "logs", "--model-name", "a b"], "--model-name"),
    (["--name", "m", "--pvc", "logs", "--model-path", "../escape"], "--model-path"),
    (["--name", "m", "--pvc", "logs", "--replicas", "0"], "--replicas"),
    (["--name", "m", "--pvc", "logs", "--gpus", "99"], "--gpus"),
    (["--name", "m", "--pvc", "logs", "--cpu", "0"], "--cpu"),
    (["--name", "m", "--pvc", "logs", "--version-policy", "specific"], "--versions"),
    (["--name", "m", "--pvc", "logs", "--versions", "3"], "--versions"),
    (["--name", "m", "--pvc", "logs", "--version-policy", "specific", "--versions", "x"], "--versions"),
    (["--name", "m", "--pvc", "logs", "--smoke-payload", "[1]"], "--smoke-payload"),
    (["--name", "m", "--pvc", "logs", "--smoke-payload", "{nope"], "--smoke-payload"),
    (["--name", "m", "--pvc", "logs", "--keep-versions", "2"], "--keep-versions"),
    (["--name", "m", "--pvc", "logs", "--rest-url", "ftp://x"], "--rest-url"),
    (["--name", "m", "--pvc", "logs", "--target", "kserve", "--smoke-payload", "{}"], "--smoke-payload"),
    (["--name", "m", "--pvc", "logs", "--image", "UPPER CASE"], "--image"),
    (["--name", "m", "--pvc", "Bad PVC"], "--pvc"),
])
def test_bad_serve_input_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    assert main(["serve", *argv, *NO_CLUSTER]) == 2
    err = capsys.readouterr().err
    assert (f"invalid {flag}=" in err or f"missing {flag}: " in err) and "Traceback" not in err


def test_a_bad_export_is_refused_naming_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "saved_model.pb").write_bytes(b"")
    assert main(["serve", "--name", "m", "--pvc", "logs", "--model-dir-local", str(tmp_path), *NO_CLUSTER]) == 2
    err = capsys.readouterr().err
    assert "--model-dir-local" in err and "No versions of servable" in err and "v1" in err
    export(tmp_path / "ok", "1", "2")
    assert main(["serve", "--name", "m", "--pvc", "logs", "--model-dir-local", str(tmp_path / "ok"), "--version-policy",
                 "specific", "--versions", "5", *NO_CLUSTER]) == 2
    assert "found 1, 2" in capsys.readouterr().err


def test_dry_run_and_kserve_render_without_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = export(tmp_path / "m", "1", "2")
    assert main(["serve", "--name", "m", "--pvc", "logs", "--model-dir-local", str(model), "--dry-run", "--json", *NO_CLUSTER]) == 0
    result = json.loads(capsys.readouterr().out)
    kinds = [m["kind"] for m in result["manifests"]]
    assert kinds == ["Deployment", "Service"] and result["succeeded"]
    result = serve("m", pvc="logs", gpus=1, target="kserve", connection=Connection("/nonexistent"))
    [isvc] = result.manifests or []
    assert isvc["spec"]["predictor"]["tensorflow"]["runtimeVersion"].endswith("-gpu")
