"""Issue 42, round four of the hardening: the command line's input, exit codes and messages.
Every command runs through `vpipe`'s own entry point (`main`), as a user types it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.kubeconfigs import TEAM_CONTEXTS
from volcano_pipelines.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------- item 7: a kubeconfig or context not there

# Every command that reaches a cluster, with valid input otherwise.
CLUSTER_COMMANDS = [
    ["render", "tf", "--name", "j"],
    ["train", "tf", "--name", "j", "--code-url", "http://files/", "--dry-run"],
    ["train", "tf", "--name", "j", "--code-url", "http://files/"],
    ["train", "mpi", "--name", "j", "--", "hostname"],
    ["status", "j"],
    ["reap", "j"],
    ["tensorboard", "--name", "tb", "--log-pvc", "logs"],
    ["serve", "--name", "m", "--pvc", "models"],
    ["pv", "reuse", "pv1", "--for", "claim"],
    ["namespace", "prepare", "team-a", "--pull-secret-from", "infra/registry"],
]


@pytest.fixture
def no_default_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-default"))


@pytest.mark.usefixtures("no_default_kubeconfig")
@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_kubeconfig_that_does_not_exist_is_bad_input_for_every_command(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]) -> None:
    missing = str(tmp_path / "nowhere" / "kubeconfig")
    cut = command.index("--") if "--" in command else len(command)
    code, out, err = _run(capsys, *command[:cut], "--kubeconfig", missing, *command[cut:])
    assert code == 2 and out == "", err
    assert err == f"vpipe: error: invalid --kubeconfig={missing!r}: an existing kubeconfig file\n"


@pytest.mark.usefixtures("no_default_kubeconfig")
@pytest.mark.parametrize("command", CLUSTER_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_context_the_kubeconfig_lacks_is_bad_input_for_every_command(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TEAM_CONTEXTS)
    cut = command.index("--") if "--" in command else len(command)
    code, out, err = _run(capsys, *command[:cut], "--kubeconfig", str(kubeconfig), "--context", "nope",
                          *command[cut:])
    assert code == 2 and out == "", err
    assert err == "vpipe: error: invalid --context='nope': a context of the kubeconfig: bare, other, team\n"


@pytest.mark.usefixtures("no_default_kubeconfig")
def test_an_unreachable_cluster_stays_a_cluster_problem(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TEAM_CONTEXTS)  # nothing listens at its server's address
    code, out, err = _run(capsys, "status", "j", "--kubeconfig", str(kubeconfig), "--context", "other")
    assert code == 3, err
    assert "cannot reach the Kubernetes API server" in err and "team-b/j" in err and "Traceback" not in err


# --------------------------------------------------------- item 11: a local TF job with no code


def test_a_local_tf_job_without_code_is_refused_before_anything_is_created(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "train", "tf", "--name", "x", "--backend", "local")
    assert code == 2 and out == "", err
    assert err == ("vpipe: error: missing --code-url: with the local backend, the code holding run.sh: --code-url "
                   "(an http(s) URL) or --code-path (a directory on this machine)\n")
    assert list(tmp_path.iterdir()) == []  # no ./vpipe-local, no job


# ------------------------------------------------------- item 15: messages that leaked internals


def test_a_switch_is_named_as_typed_without_a_value(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "train", "tf", "--name", "x", "--backend", "local", "--no-wait",
                        "--code-path", str(tmp_path))
    assert code == 2
    assert err == ("vpipe: error: invalid --no-wait: only with the cluster backend: the local backend's tasks run in "
                   "this process and end with it\n")


def test_a_value_not_given_is_missing_not_none() -> None:
    from volcano_pipelines.errors import InputError

    assert str(InputError("--dest-pvc", None, "the claim mounted at DST")) == "missing --dest-pvc: the claim mounted at DST"
    assert str(InputError("dest_pvc", "", "x")) == "invalid dest_pvc='': x"


def test_an_mpi_job_without_a_program_says_how_to_give_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "render", "mpi", "--name", "x")
    assert code == 2
    assert err.startswith("vpipe: error: missing --command: the program for mpiexec to run: --command 'PROGRAM ARGS', "
                          "or the program and its arguments after --"), err
    assert "[]" not in err


@pytest.mark.parametrize("words", [[], ["render"], ["train"], ["pv"], ["namespace"], ["schedule"]])
def test_a_missing_command_word_lists_the_words(capsys: pytest.CaptureFixture[str], words: list[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(words)
    err = capsys.readouterr().err
    assert stop.value.code == 2
    last = err.strip().splitlines()[-1]
    assert "a command is missing: vpipe" in last and "_command" not in err and "required: kind" not in err, err
    if words == ["pv"]:
        assert last == "vpipe pv: error: a command is missing: vpipe pv reuse ..."
    if words == ["render"]:
        assert last == "vpipe render: error: a command is missing: vpipe render tf|mpi ..."


def test_a_step_argument_is_named_by_the_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["examples", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    code, _, err = _run(capsys, "examples", "--out", str(tmp_path))
    assert code == 2 and err.startswith(f"vpipe: error: invalid --out={str(tmp_path)!r}: a directory without"), err


@pytest.mark.parametrize("command", [["render", "tf"], ["render", "mpi"], ["train", "tf"]])
@pytest.mark.parametrize("length", [45, 54, 63])
def test_a_job_name_has_one_length_limit(capsys: pytest.CaptureFixture[str], command: list[str], length: int) -> None:
    name = "a" * length
    extra = ["--evaluator", "--code-url", "http://files/", "--dry-run"] if command[0] == "train" else []
    program = ["--", "true"] if command[1] == "mpi" else []
    code, _, err = _run(capsys, *command, "--name", name, *extra, *program)
    assert code == 2
    assert err == (f"vpipe: error: invalid --name={name!r}: at most 44 characters of lowercase letters, digits and '-', "
                   "starting with a lowercase letter and ending with a letter or digit (Volcano names each pod "
                   "<name>-<task>-<index>, a hostname of at most 63)\n")


def test_a_44_character_name_is_accepted_for_every_task(capsys: pytest.CaptureFixture[str]) -> None:
    # 44: room for a split role's task (`-mpiworker-s9-99999`, volcano/slices.py).
    assert main(["render", "tf", "--name", "a" * 44, "--evaluator", "--chief", "--workers", "100"]) == 0
    assert main(["render", "mpi", "--name", "a" * 44, "--workers", "100", "--", "true"]) == 0


# ------------------------------------------------------------ item 17: usage and compile --check


def _every_parser() -> list[tuple[str, object]]:
    import argparse

    from volcano_pipelines.cli import build_parser, commands

    found = []
    for command in commands():
        todo = [build_parser(command)._subparsers._group_actions[0].choices[command]]  # type: ignore[union-attr]
        while todo:
            parser = todo.pop()
            found.append((parser.prog, parser))
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    todo.extend(action.choices.values())
    return found


@pytest.mark.parametrize(("prog", "parser"), _every_parser(), ids=lambda p: p if isinstance(p, str) else "")
def test_every_usage_is_one_synopsis_line_in_one_style(prog: str, parser: object) -> None:
    usage = parser.format_usage()  # type: ignore[attr-defined]
    assert usage.startswith(f"usage: {prog}") and usage.count("\n") == 1, usage
    assert "[-h]" not in usage and "--help lists" not in usage and "{" not in usage, usage


def test_compile_check_suggests_the_command_with_the_same_root(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    root = tmp_path / "comp dir"
    root.mkdir()
    code, _, err = _run(capsys, "compile", "--check", "--root", str(root))
    assert code == 1
    assert err.strip().splitlines()[-1].endswith(f"run `vpipe compile --root '{root}'`"), err


# --------------------------------------------- item 6: a local job's post-mortem record, found


@pytest.fixture
def failing_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Training code whose every task fails at once; no record of any cluster job around."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "run.sh").write_text("#!/bin/sh\necho 'cannot train'\nexit 3\n")
    (code / "run.sh").chmod(0o755)
    monkeypatch.setenv("VPIPE_POST_MORTEM_DIR", str(tmp_path / "cluster-records"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return code


def _train_failing(capsys: pytest.CaptureFixture[str], code: Path, *extra: str) -> str:
    status, _, err = _run(capsys, "train", "tf", "--name", "fail1", "--backend", "local", "--code-path", str(code),
                          "--no-restart-on-failure", "-q", *extra)
    assert status == 1, err
    return err


def test_a_failed_local_run_says_where_its_record_is_and_status_finds_it_there(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_code: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    err = _train_failing(capsys, failing_code)
    record = work / "vpipe-local" / "logs" / "post-mortem" / "default" / "fail1.md"
    assert f"post-mortem record: {record} (vpipe status fail1 -n default --post-mortem)\n" in err, err
    # The command it names works as written, from the same directory: the summary it saved.
    code, out, err = _run(capsys, "status", "fail1", "-n", "default", "--post-mortem")
    assert code == 0 and out == record.read_text() and out.startswith("# Post-mortem: job default/fail1"), err
    code, out, _ = _run(capsys, "status", "fail1", "--post-mortem")  # -n found from the record
    assert code == 0 and out == record.read_text()
    # From elsewhere, --local-dir names the job's working directory.
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "status", "fail1", "--post-mortem")
    assert code == 1 and "--local-dir DIR" in err, err
    code, out, err = _run(capsys, "status", "fail1", "--local-dir", str(work / "vpipe-local"))
    assert code == 0 and out == record.read_text(), err


def test_a_local_log_dir_given_to_the_job_is_where_status_reads(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_code: Path) -> None:
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "run-logs"
    err = _train_failing(capsys, failing_code, "--local-dir", str(tmp_path / "w"), "--local-log-dir", str(logs))
    shown = (f"(vpipe status fail1 -n default --post-mortem --local-dir {tmp_path / 'w'} "
             f"--local-log-dir {logs})")
    assert f"post-mortem record: {logs / 'post-mortem' / 'default' / 'fail1.md'} {shown}" in err, err
    code, out, err = _run(capsys, *shown.strip("()").split()[1:])
    assert code == 0 and out.startswith("# Post-mortem: job default/fail1"), err


def test_a_wrong_name_and_a_wrong_namespace_are_told_apart(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_code: Path) -> None:
    from volcano_pipelines.postmortem.save import write_record

    write_record({"job": {"namespace": "team-a", "name": "mnist", "phase": "Failed"}, "pods": []},
                 tmp_path / "cluster-records")
    monkeypatch.chdir(tmp_path)
    code, _, wrong_namespace = _run(capsys, "status", "mnist", "-n", "team-b", "--post-mortem")
    assert code == 1
    assert "no post-mortem record of job team-b/mnist" in wrong_namespace
    assert "job mnist has a record in namespace team-a (-n team-a)" in wrong_namespace, wrong_namespace
    code, _, wrong_name = _run(capsys, "status", "mnits", "-n", "team-a", "--post-mortem")
    assert code == 1
    assert "no job named mnits has one (records in namespace team-a: mnist)" in wrong_name, wrong_name
    code, _, two = _run(capsys, "status", "mnist", "--local-dir", str(tmp_path / "nowhere"))
    assert code == 1 and "namespace default has no records" in two, two


# ------------------------------------------------- item 13: the quickstart's placeholder code URL

PLACEHOLDER = "http://files.example/tf-ps/"


def test_the_quickstart_help_shows_the_placeholder_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["quickstart", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"(default {PLACEHOLDER})" in help_text and "--json" in help_text


def test_quickstart_render_warns_of_the_placeholder(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    code, out, err = _run(capsys, "quickstart", "--render")
    assert code == 0 and yaml.safe_load(out)["kind"] == "Job"
    assert err == (f"vpipe quickstart: warning: the job fetches its code from {PLACEHOLDER}, a placeholder: give "
                   "--code-url with the URL where the cluster's pods fetch the examples' tf-ps/ (a copy: vpipe "
                   "examples --out DIR)\n")
    code, out, err = _run(capsys, "quickstart", "--render", "--code-url", "http://code.example/tf-ps/")
    assert code == 0 and err == "" and "http://code.example/tf-ps/" in out


def test_quickstart_refuses_to_submit_the_placeholder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TEAM_CONTEXTS)
    code, out, err = _run(capsys, "quickstart", "--kubeconfig", str(kubeconfig))
    assert code == 2 and out == ""
    assert err.startswith("vpipe: error: missing --code-url: with --kubeconfig, the http(s) URL where the cluster's "
                          "pods fetch"), err
    assert PLACEHOLDER in err


def test_quickstart_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import yaml

    url = ["--code-url", "http://code.example/tf-ps/"]
    code, as_json, err = _run(capsys, "quickstart", "--render", "--json", *url)
    assert code == 0, err
    code, as_yaml, _ = _run(capsys, "quickstart", "--render", *url)
    assert json.loads(as_json) == yaml.safe_load(as_yaml)
    # The run on this machine prints its summary as JSON too: tests/local/test_quickstart.py.


@pytest.mark.usefixtures("no_default_kubeconfig")
def test_a_flag_not_given_is_named_missing_on_the_command_line(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TEAM_CONTEXTS)
    code, _, err = _run(capsys, "sync", "webhdfs://127.0.0.1:9/data", str(tmp_path / "dst"), "--workers", "2", "-q",
                        "--kubeconfig", str(kubeconfig))
    assert code == 2 and err.startswith("vpipe: error: missing --dest-pvc: the PersistentVolumeClaim"), err
    assert "None" not in err and not (tmp_path / "dst").exists()
    from volcano_pipelines.postmortem.save import write_record

    for namespace in ("a", "b"):
        write_record({"job": {"namespace": namespace, "name": "m", "phase": "Failed"}, "pods": []}, tmp_path / "pm")
    monkeypatch.setenv("VPIPE_POST_MORTEM_DIR", str(tmp_path / "pm"))
    code, _, err = _run(capsys, "status", "m", "--post-mortem")
    assert code == 2
    assert err == ("vpipe: error: missing --namespace: one of a, b: job m has a post-mortem record in each of these "
                   "namespaces (give -n)\n")


@pytest.mark.parametrize("flag", ["--local-dir", "--local-log-dir"])
@pytest.mark.parametrize("value", ["", "  "])
def test_status_refuses_an_empty_local_directory(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    code, out, err = _run(capsys, "status", "j", flag, value)
    assert code == 2 and out == ""
    assert err == f"vpipe: error: invalid {flag}={value!r}: a directory path (not empty)\n"


# ------------------------------------------------- item 17: what `ps` shows for a local pod


def test_ps_shows_a_local_pod_by_a_label_not_its_inline_script(tmp_path: Path) -> None:
    """The local backend ran each pod as `shim.py FD -- bash -c <150-line entry script>
    vpipe-entry ARGS`: that script was each task's line in `ps` for the whole run."""
    import os
    import subprocess

    from volcano_pipelines.localjob.processes import supervised_popen

    script = 'echo started "$0" "$@"\n' + "".join(f"# line {i}\n" for i in range(150)) + "exec sleep 60\n"
    proc, control = supervised_popen(["bash", "-c", script, "vpipe-entry", "--job_name", "worker"],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=str(tmp_path))
    try:
        assert proc.stdout is not None
        # The program got its whole command: the script ran, with its $0 and arguments.
        assert proc.stdout.readline() == b"started vpipe-entry --job_name worker\n"
        shim = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:-1]
        assert shim[-5:] == [b"--", b"vpipe-entry", b"(152-line bash script)", b"--job_name", b"worker"], shim
        # Once bash has run the script to its `exec`, no process of the pod shows it (until then
        # bash itself does: the echo comes before the exec).
        import time

        deadline = time.monotonic() + 10
        while True:
            pod = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _group(int(p.name)) == proc.pid]
            lines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in pod}
            if len(pod) >= 2 and any(cmd.startswith(b"sleep\0") for cmd in lines.values()):
                break
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)
        for pid, cmd in lines.items():
            assert b"# line" not in cmd, pid
    finally:
        os.write(control, b"x")  # kill the pod now
        os.close(control)
        proc.wait(30)


def test_a_local_pod_running_the_entry_script_is_labelled_by_its_name() -> None:
    """The entry script runs from the environment (volcano/entrypoint.py): the shim's label is
    its name and the task's arguments."""
    from volcano_pipelines.localjob.processes import command_label
    from volcano_pipelines.volcano.entrypoint import ENTRY_COMMAND

    assert command_label([*ENTRY_COMMAND, "--job_name", "worker"]) == ["vpipe-entry", "--job_name", "worker"]


def _group(pid: int) -> int | None:
    import os

    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_quickstart_names_a_kubeconfig_that_is_not_there_as_every_command_does(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere")
    code, out, err = _run(capsys, "quickstart", "--kubeconfig", missing, "--code-url", "http://code.example/tf-ps/")
    assert code == 2 and out == ""
    assert err == f"vpipe: error: invalid --kubeconfig={missing!r}: an existing kubeconfig file\n"
