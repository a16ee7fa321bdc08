"""Scheduled retraining: the recurring-run request, checked against the KFP API's own models
(kfp_server_api); the CLI's input errors and its dry run. No KFP server exists here, so the
final API call is not exercised (only that an unreachable server is exit 3)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests import needs
import yaml

needs.module("kfp_server_api", "the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")

import kfp_server_api

from volcano_pipelines.cli import main
from volcano_pipelines.errors import InputError
from volcano_pipelines.kfp import schedule

REPO = Path(__file__).resolve().parents[3]
PIPELINE = REPO / "pipelines" / "train-and-serve.yaml"
REQUIRED = {"model_name": "mnist", "dataset_url": "hdfs://nn:8020/datasets/mnist", "data_pvc": "mnist-data", "log_pvc": "mnist-logs",
            "image": "registry.local/tf:2.21"}


def _request(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"pipeline_text": PIPELINE.read_text(), "pipeline_source": str(PIPELINE),
                                 "cron": "0 2 * * *", "parameters": REQUIRED}
    arguments.update(overrides)
    return schedule.recurring_run_request(**arguments)


@pytest.mark.parametrize(("raw", "expected"), [
    ("0 2 * * *", "0 0 2 * * *"),
    ("*/15 * * * 1-5", "0 */15 * * * 1-5"),
    ("30 0 2 * * ?", "30 0 2 * * ?"),
    ("  0   2 * * *  ", "0 0 2 * * *"),
])
def test_cron_has_six_fields(raw: str, expected: str) -> None:
    assert schedule.cron_expression(raw) == expected


@pytest.mark.parametrize("raw", ["", "0 2 * *", "0 0 2 * * * 2026", "@daily", "0 2 * * *; rm -rf /"])
def test_other_crons_are_refused(raw: str) -> None:
    with pytest.raises(InputError) as err:
        schedule.cron_expression(raw)
    assert err.value.field == "cron"


def test_request_builds_the_apis_own_model() -> None:
    request = _request(display_name="nightly mnist", service_account="vpipe-runner", experiment_id="exp-1",
                       parameters={**REQUIRED, "workers": "4", "gpus": '{"worker": 1}', "sync_delete": "true",
                                   "ttl": "7200"})
    model = schedule.to_model(request)
    assert isinstance(model, kfp_server_api.V2beta1RecurringRun)
    assert isinstance(model.trigger, kfp_server_api.V2beta1Trigger)
    assert isinstance(model.trigger.cron_schedule, kfp_server_api.V2beta1CronSchedule)
    assert model.trigger.cron_schedule.cron == "0 0 2 * * *"
    assert model.trigger.periodic_schedule is None
    assert model.max_concurrency == "1"
    assert model.no_catchup is True
    assert model.mode == kfp_server_api.RecurringRunMode.ENABLE
    assert model.display_name == "nightly mnist" and model.experiment_id == "exp-1"
    assert model.service_account == "vpipe-runner"
    assert isinstance(model.runtime_config, kfp_server_api.V2beta1RuntimeConfig)
    assert model.runtime_config.parameters == {**REQUIRED, "workers": 4, "gpus": {"worker": 1}, "sync_delete": True,
                                               "ttl": 7200}
    # The JSON the client sends (the v2beta1 API spells its fields in snake case).
    body = kfp_server_api.ApiClient().sanitize_for_serialization(model)
    assert body["max_concurrency"] == "1" and body["no_catchup"] is True and body["mode"] == "ENABLE"
    assert body["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert body["runtime_config"]["parameters"]["workers"] == 4


def test_caching_is_off_for_every_task_including_the_exit_handlers_group() -> None:
    spec = _request()["pipeline_spec"]
    pipeline_spec = spec["pipeline_spec"]  # with the platform spec (the sync step's PVC mount) beside it
    assert "platforms" in spec["platform_spec"]
    tasks = dict(pipeline_spec["root"]["dag"]["tasks"])
    for component in pipeline_spec["components"].values():
        tasks.update((component.get("dag") or {}).get("tasks") or {})
    assert {"sync", "train-tf", "finish-run", "exit-handler-1"} <= set(tasks)
    assert all(task["cachingOptions"] == {"enableCache": False} for task in tasks.values())


def test_caching_is_turned_off_even_in_a_pipeline_compiled_with_it_on() -> None:
    docs = list(yaml.load_all(PIPELINE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))  # libyaml: same objects, less CPU
    tasks = [*docs[0]["root"]["dag"]["tasks"].values(), *docs[0]["components"]["comp-exit-handler-1"]["dag"]["tasks"].values()]
    for task in tasks:
        task["cachingOptions"] = {"enableCache": True}
    spec = _request(pipeline_text=yaml.safe_dump_all(docs))["pipeline_spec"]["pipeline_spec"]
    assert "'enableCache': True" not in str(spec) and "'enableCache': False" in str(spec)


def test_unknown_and_missing_parameters_are_refused() -> None:
    with pytest.raises(InputError, match="a parameter of the pipeline: args, code_sha256"):
        _request(parameters={**REQUIRED, "wrokers": "3"})
    with pytest.raises(InputError, match="missing: model_name$"):
        _request(parameters={"dataset_url": "x", "data_pvc": "p"})
    with pytest.raises(InputError, match="workers is an integer"):
        _request(parameters={**REQUIRED, "workers": "many"})
    with pytest.raises(InputError, match="JSON object"):
        _request(parameters={**REQUIRED, "gpus": "[1]"})


def test_a_file_that_is_not_a_pipeline_is_refused() -> None:
    with pytest.raises(InputError, match="not valid YAML"):
        _request(pipeline_text="a: [")
    with pytest.raises(InputError, match="pipelineInfo"):
        _request(pipeline_text="kind: Workflow\n")
    with pytest.raises(InputError, match="no field named|Message type"):
        _request(pipeline_text=PIPELINE.read_text().replace("pipelineInfo:", "pipelineInfo:\n  colour: red", 1))


def test_a_field_the_api_does_not_know_fails_before_sending() -> None:
    with pytest.raises(TypeError, match="no field 'max_concurency'"):
        schedule.to_model({**_request(), "max_concurency": "1"})


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["schedule", "kfp", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _params() -> list[str]:
    return [arg for name, value in REQUIRED.items() for arg in ("--param", f"{name}={value}")]


def test_cli_dry_run_prints_the_request(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", str(PIPELINE), "--cron", "0 3 * * 1",
                        *_params(), "--param", "workers=2", "--disabled", "--dry-run")
    assert code == 0
    request = json.loads(out)
    assert request["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * 1"
    assert request["mode"] == "DISABLE" and request["runtime_config"]["parameters"]["workers"] == 2


@pytest.mark.parametrize(("argv", "flag"), [
    (["--cron", "0 3 * *"], "--cron"),
    (["--cron", "0 3 * * *", "--param", "workers"], "--param"),
    (["--cron", "0 3 * * *", "--param", "nope=1"], "--param"),
])
def test_cli_bad_input_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    code, out, err = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", str(PIPELINE), *_params(), *argv)
    assert code == 2 and out == ""
    assert f"invalid {flag}=" in err and "Traceback" not in err


def test_cli_missing_pipeline_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", str(tmp_path / "none.yaml"),
                        "--cron", "0 3 * * *")
    assert code == 2 and "--pipeline-file" in err


def test_cli_unreachable_server_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, _, err = _cli(capsys, "--host", f"http://127.0.0.1:{port}", "--pipeline-file", str(PIPELINE),
                        "--cron", "0 3 * * *", *_params())
    assert code == 3
    assert f"cannot reach the KFP API at http://127.0.0.1:{port}" in err


# --- hostile and wrong input (issue 24, item 3) ------------------------------------------------


@pytest.mark.parametrize("raw", ["61 2 * * *", "a b c d e", "0 24 * * *", "0 2 32 * *", "0 2 * 13 *", "0 2 * * 7",
                                 "? 2 * * *", "*/0 * * * *", "5-1 * * * *", "60 0 2 * * *", "0 2 * * MON-FOO"])
def test_crons_out_of_range_are_refused(raw: str) -> None:
    with pytest.raises(InputError) as err:
        schedule.cron_expression(raw)
    assert err.value.field == "cron" and "not" in err.value.allowed


@pytest.mark.parametrize(("raw", "expected"), [("0 2 * JAN-MAR MON", "0 0 2 * JAN-MAR MON"),
                                               ("0 0 1,15 * *", "0 0 0 1,15 * *"), ("59 23 31 12 6", "0 59 23 31 12 6")])
def test_crons_in_range_are_kept(raw: str, expected: str) -> None:
    assert schedule.cron_expression(raw) == expected


@pytest.mark.parametrize(("param", "said"), [("workers=-5", "workers=-5"), ("model_name=BAD_NAME", "model_name=BAD_NAME"),
                                             ("ps=-1", "ps=-1"), ("max_retry=-3", "max_retry=-3")])
def test_parameters_the_training_step_refuses_are_refused_now(param: str, said: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    name = param.split("=")[0]
    params = [arg for key, value in REQUIRED.items() if key != name for arg in ("--param", f"{key}={value}")]
    code, out, err = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", str(PIPELINE), "--cron", "0 3 * * *",
                          *params, "--param", param, "--dry-run")
    assert code == 2 and out == "", err
    assert f"invalid --param='{said}'" in err and "train_tf step" in err, err


@pytest.mark.parametrize("host", ["not a url", "ftp://kfp.example:8888", "http://kfp.example:99999", "", "http://",
                                  "kfp.example:8888", "http://kfp example:8888", "http://kfp.example:0"])
def test_a_bad_host_exits_2_before_anything_is_sent(host: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "--host", host, "--pipeline-file", str(PIPELINE), "--cron", "0 3 * * *", *_params())
    assert code == 2, err
    assert "invalid --host=" in err and "Traceback" not in err


@pytest.mark.parametrize("path", ["/dev/urandom", "/dev/zero"])
def test_a_device_as_pipeline_file_is_refused_at_once(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", path, "--cron", "0 3 * * *")
    assert code == 2 and "a regular file" in err, err


def test_a_binary_or_huge_pipeline_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    binary = tmp_path / "p.yaml"
    binary.write_bytes(bytes(range(256)) * 16)
    code, _, err = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", str(binary), "--cron", "0 3 * * *")
    assert code == 2 and "UTF-8 text" in err, err
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)
    code, _, err = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", str(huge), "--cron", "0 3 * * *")
    assert code == 2 and "at most 16 MiB" in err, err


class KfpStandIn:
    """Answers the three calls as KFP's REST API (v2beta1) documents them; the real backend
    cannot run here. Records what it was sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, Any]] = []

    def answer(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        self.seen.append((method, path, body))
        if method == "GET" and path.startswith("/apis/v2beta1/experiments"):
            return 200, {}  # no experiment of that name: protobuf JSON leaves the empty list out
        if method == "POST" and path == "/apis/v2beta1/experiments":
            return 200, {"experiment_id": "exp-7", "display_name": body["display_name"]}
        if method == "POST" and path == "/apis/v2beta1/recurringruns":
            return 200, {"recurring_run_id": "rr-42", "display_name": body["display_name"], "status": "ENABLED"}
        return 404, {"error": "not found", "code": 5}


def _kfp_server(stand_in: KfpStandIn) -> Any:
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, answer = stand_in.answer(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _reply

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()  # shutdown waits one poll
    return server


def test_schedule_against_a_server_answering_as_kfp_documents(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    stand_in = KfpStandIn()
    server = _kfp_server(stand_in)
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    try:
        code, out, err = _cli(capsys, "--host", f"http://127.0.0.1:{server.server_address[1]}/", "--pipeline-file",
                              str(PIPELINE), "--cron", "0 3 * * *", *_params(), "--experiment", "nightly",
                              "--namespace", "team-a", "--token-file", str(token))
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0, err
    assert out.startswith("recurring run rr-42 (train-and-serve): cron '0 0 3 * * *'"), out
    methods = [(m, p.split("?")[0]) for m, p, _ in stand_in.seen]
    assert methods == [("GET", "/apis/v2beta1/experiments"), ("POST", "/apis/v2beta1/experiments"),
                       ("POST", "/apis/v2beta1/recurringruns")]
    assert "namespace=team-a" in stand_in.seen[0][1] and "display_name" in stand_in.seen[0][1]
    assert stand_in.seen[1][2] == {"display_name": "nightly", "namespace": "team-a"}
    sent = stand_in.seen[2][2]
    assert sent["experiment_id"] == "exp-7" and sent["max_concurrency"] == "1" and sent["no_catchup"] is True
    assert schedule.to_model(sent)  # what went out is the API's own model


@pytest.mark.parametrize(("kind", "said"), [
    ("html", "did not answer like the KFP API"), ("json", "answered without the experiment_id"),
    ("json-list", "did not answer like the KFP API"), ("binary", "did not answer like the KFP API"),
    ("empty", "did not answer like the KFP API"), ("html-500", "(HTTP 500)"), ("json-500", "(HTTP 500)"),
    ("html-401", "permission denied"), ("json-401", "permission denied"),
])
def test_a_server_that_is_not_kfp_is_one_clear_error(kind: str, said: str, capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    from tests.hostile_servers import serve

    for tls in (False, True) if kind == "html" else (False,):
        with serve(kind, tls_dir=tmp_path if tls else None) as server:
            extra = ["--ca-file", server.ca_file] if server.ca_file else []
            code, out, err = _cli(capsys, "--host", server.url, "--pipeline-file", str(PIPELINE), "--cron", "0 3 * * *",
                                  *_params(), *extra)
        assert code == 3 and out == "", err
        assert said in err and server.url in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
        assert len(server.requests) <= 2  # one list, one create at most: no retries of errors


def test_a_server_that_never_answers_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    import time

    from tests.hostile_servers import serve

    with serve("silent") as server:
        started = time.monotonic()
        code, _, err = _cli(capsys, "--host", server.url, "--pipeline-file", str(PIPELINE), "--cron", "0 3 * * *",
                            *_params(), "--request-timeout", "0.2")  # waited out for real: kept short
        took = time.monotonic() - started
    assert code == 3 and "did not answer within 0.2s" in err, err
    assert took < 20, took  # before: kfp.Client waited for ever


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e400"])
def test_a_bad_request_timeout_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", str(PIPELINE), "--cron", "0 3 * * *",
                        *_params(), "--request-timeout", value)
    assert code == 2 and "--request-timeout" in err, err


def test_scheduled_runs_get_the_training_timeout_and_a_bad_one_is_refused_now() -> None:
    """A scheduled run has the pipeline's training timeout unless --param says otherwise, and a
    value the train step would refuse at 2 a.m. is refused when the schedule is made."""
    spec = next(yaml.load_all(PIPELINE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))  # libyaml: same objects, less CPU
    assert spec["root"]["inputDefinitions"]["parameters"]["timeout"]["defaultValue"] == 86400.0
    request = _request(parameters={**REQUIRED, "timeout": "7200"})
    assert request["runtime_config"]["parameters"]["timeout"] == 7200.0
    with pytest.raises(InputError, match="timeout"):
        _request(parameters={**REQUIRED, "timeout": "0"})


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["send", "dry-run"])
def test_a_ca_file_that_holds_no_certificate_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          dry_run: list[str]) -> None:
    """Issue 33, item 11: /etc/passwd as --ca-file failed every handshake and read as "cannot
    reach" (exit 3); it is the user's input (exit 2), found before anything is sent."""
    not_pem = tmp_path / "passwd"
    not_pem.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with socket.socket() as probe:  # nothing listens: a request sent would be exit 3
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = _cli(capsys, "--host", f"https://127.0.0.1:{port}", "--pipeline-file", str(PIPELINE),
                          "--cron", "0 3 * * *", *_params(), "--ca-file", str(not_pem), *dry_run)
    assert code == 2 and out == "", err
    assert f"invalid --ca-file={str(not_pem)!r}: a PEM file of CA certificates" in err


def test_a_missing_extra_names_the_extra_not_the_module(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33, item 11: the bare install said `needs 'google'` (kfp's protobuf)."""
    import sys

    monkeypatch.setitem(sys.modules, "google.protobuf", None)  # import google.protobuf -> ModuleNotFoundError
    monkeypatch.setitem(sys.modules, "google.protobuf.json_format", None)
    code, _, err = _cli(capsys, "--host", "http://kfp.invalid", "--pipeline-file", str(PIPELINE), "--cron", "0 3 * * *",
                        *_params(), "--dry-run")
    assert code == 2, err
    assert err.startswith("vpipe: error: `vpipe schedule` needs the kfp extra, which is not installed"), err
    assert "pip install 'volcano-pipelines[kfp]'" in err


def test_a_data_pvc_kfp_cannot_mount_is_refused_when_scheduling() -> None:
    """Issue 28 item 8: KFP names the sync pod's volume after the PVC (a DNS label); a PVC name
    with a dot is a valid PVC but would make every scheduled run fail before sync starts."""
    with pytest.raises(InputError, match=r"data_pvc=team\.data.*DNS label.*volume after the PVC"):
        _request(parameters={**REQUIRED, "data_pvc": "team.data"})
    assert _request(parameters={**REQUIRED, "data_pvc": "team-data"})  # a DNS label is fine
