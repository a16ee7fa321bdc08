"""What a new, slightly adversarial user broke in the CLI (issue 9, items 10 and 13-22), each
through `vpipe` itself: exit codes, messages, and that nothing reaches a cluster."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from volcano_pipelines.cli import main
from volcano_pipelines.cli.flags import cli_help, in_flags, negated_help
from volcano_pipelines.interface.spelling import flag_spec
from volcano_pipelines.k8s.client import connect
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps._train import status, train_mpi, train_tf


def kubeconfig(path: Path, server: str, namespace: str | None = None, insecure: bool = False) -> Path:
    context = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    cluster = {"server": server, **({"insecure-skip-tls-verify": True} if insecure else {})}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}],
        "contexts": [{"name": "c", "context": context}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))
    return path


@pytest.mark.parametrize("argv", [
    ["render", "tf", "--name", "j", "--gpus", "1"],  # no longer --gpus-per-worker
    ["render", "tf", "--name", "j", "--memory", "8Gi"],  # no longer --memory-per-worker
    ["render", "tf", "--name", "j", "--work", "3"],
])
def test_abbreviated_flags_are_refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and err.startswith("usage: vpipe render tf")


def test_a_stray_word_is_an_error_not_a_training_argument(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["render", "tf", "--name", "j", "--workers", "2", "3"])
    assert info.value.code == 2
    assert "unrecognized arguments: 3 (arguments for the training program go after --)" in capsys.readouterr().err
    assert main(["render", "tf", "--name", "j", "--workers", "2", "--", "3"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    assert job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["args"] == ["3"]


def test_arguments_after_dashdash_only_where_a_program_takes_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["status", "j", "--", "x"])
    assert info.value.code == 2 and "unexpected arguments after --" in capsys.readouterr().err


def test_mpiexec_arg_takes_a_value_starting_with_a_dash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "mpi", "--name", "h", "--mpiexec-arg", "-x", "--mpiexec-arg", "FOO=1", "--", "prog"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["args"] == ["-x", "FOO=1", "prog"]


@pytest.mark.parametrize("argv,flag", [(["status", ""], "JOB"), (["status", "j", "-n", ""], "--namespace"),
                                       (["status", "j\n"], "JOB")])
def test_status_validates_names_before_any_request(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   argv: list[str], flag: str) -> None:
    config = kubeconfig(tmp_path / "config", "https://127.0.0.1:1")
    assert main([*argv, "--kubeconfig", str(config)]) == 2
    assert f"invalid {flag}=" in capsys.readouterr().err


def test_the_context_namespace_is_used_when_none_is_given(tmp_path: Path) -> None:
    assert connect(str(kubeconfig(tmp_path / "a", "https://127.0.0.1:1", namespace="team"))).namespace == "team"
    assert connect(str(kubeconfig(tmp_path / "b", "https://127.0.0.1:1"))).namespace == "default"


def test_status_asks_the_context_namespace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "config", "https://127.0.0.1:1", namespace="team")
    assert main(["status", "mnist", "--kubeconfig", str(config)]) == 3
    assert "read job team/mnist" in capsys.readouterr().err


def test_malformed_kubeconfig_exits_3_with_path_and_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "config"
    bad.write_text("this: is: not: yaml: [\n")
    assert main(["status", "j", "--kubeconfig", str(bad)]) == 3
    err = capsys.readouterr().err
    assert str(bad) in err and "line 1" in err and "Traceback" not in err


@pytest.fixture
def not_an_api_server() -> Iterator[str]:
    """A real HTTP server that answers 404 to everything (a wrong URL in a kubeconfig)."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"404 page not found")

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)  # shutdown waits one poll
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_404_from_something_that_is_not_volcano_is_not_a_missing_job(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, not_an_api_server: str
) -> None:
    config = kubeconfig(tmp_path / "config", not_an_api_server)
    assert main(["status", "mnist", "--kubeconfig", str(config)]) == 3
    err = capsys.readouterr().err
    assert "does not exist" not in err and "not a Kubernetes API server with Volcano" in err


def test_insecure_kubeconfig_warns_once_in_our_words(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    caplog.set_level("WARNING")
    connect(str(kubeconfig(tmp_path / "config", "https://127.0.0.1:1", insecure=True)))
    assert "TLS verification is off for https://127.0.0.1:1" in caplog.text


def test_dry_run_prints_only_the_manifest_on_stdout(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["train", "tf", "--name", "m", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    docs = list(yaml.safe_load_all(out))
    assert len(docs) == 1 and docs[0]["kind"] == "Job"  # `> job.yaml` is valid YAML for kubectl
    assert "not created" in err


def test_render_and_help_do_not_load_the_kubernetes_client() -> None:
    code = ("import sys, io, contextlib\nfrom volcano_pipelines.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    main(['render', 'tf', '--name', 'j'])\n"
            "print(sorted(m for m in ('kubernetes', 'urllib3', 'fsspec') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "[]"


def test_top_level_usage_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("render", "train", "status", "sync"):
        assert command in out


@pytest.mark.parametrize("step,command", [(train_tf, ["train", "tf"]), (train_mpi, ["train", "mpi"]), (status, ["status"])])
def test_cli_help_is_derived_from_the_step_signature_and_docstring(
    capsys: pytest.CaptureFixture[str], step: object, command: list[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for param in params(step):  # type: ignore[arg-type]
        assert param.help, f"{param.name} has no docstring entry"
        if param.name in ("name", "args", "command") and command[0] == "status" or param.name == "args":
            continue
        # As the command line words it: flags for argument names, a --no-X switch's own sense.
        text = negated_help(param.help) if flag_spec(param).kind == "negated" else param.help
        words = " ".join(cli_help(in_flags(step, text, ())).split())[:40]  # type: ignore[arg-type]
        assert words in help_text, f"{param.name}: {words!r} not in --help"
