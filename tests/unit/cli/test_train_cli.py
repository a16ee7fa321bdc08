"""`vpipe render` / `train --dry-run` end to end through main(): flags reach the Job, bad input
exits 2 naming the flag, and nothing needs a cluster."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from volcano_pipelines.cli import main
from volcano_pipelines.cli.flags import flag_for
from volcano_pipelines.localjob.plan import expand
from volcano_pipelines.steps._train import render_mpi, render_tf
from volcano_pipelines.steps._train_spec import MPI_TASKS, TF_TASKS, param_for


def render(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["render", *argv]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def tasks(job: dict) -> dict[str, dict]:
    return {t["name"]: t for t in job["spec"]["tasks"]}


def container(job: dict, task: str) -> dict:
    return tasks(job)[task]["template"]["spec"]["containers"][0]


def test_quickstart_four_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    job = render(capsys, "tf", "--name", "mnist", "--workers", "10", "--ps", "1", "--code-url", "http://files.example/mnist/")
    assert job["metadata"]["name"] == "mnist"
    assert job["spec"]["minAvailable"] == 11
    assert tasks(job)["worker"]["replicas"] == 10
    env = {e["name"]: e["value"] for e in container(job, "worker")["env"]}
    assert env["VPIPE_CODE_URL"] == "http://files.example/mnist/"


def test_flags_reach_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    job = render(
        capsys, "tf", "--name", "m", "-n", "ml", "--chief", "--evaluator", "--queue", "q1", "--max-retry", "5",
        "--ttl", "60", "--image", "img:1", "--worker-image", "gpu:1", "--gpus-per-worker", "2", "--cpu-per-worker", "4",
        "--ps-memory", "8Gi", "--env", "A=1", "--env", "worker:B=x:y", "--pod-label", "worker:kwok/fail=1",
        "--pod-annotation", "note=hi", "--node-selector", "worker:gpu=v100", "--toleration", "worker:gpu=true:NoSchedule",
        "--toleration", "dedicated:NoExecute", "--image-pull-secret", "regcred", "--run-id", "r-1", "--label", "team=ml",
        "--data-pvc", "data", "--log-pvc", "logs", "--port", "3333", "--", "--lr", "0.1", "--name=$(id)",
    )
    s = job["spec"]
    assert (s["queue"], s["maxRetry"], s["ttlSecondsAfterFinished"], s["minAvailable"]) == ("q1", 5, 60, 4)
    assert job["metadata"]["namespace"] == "ml"
    assert job["metadata"]["labels"]["volcano-pipelines/run"] == "r-1" and job["metadata"]["labels"]["team"] == "ml"
    w, p = container(job, "worker"), container(job, "ps")
    assert w["image"] == "gpu:1" and p["image"] == "img:1"
    assert w["resources"]["requests"] == {"cpu": "4", "memory": "2Gi", "nvidia.com/gpu": "2"}
    assert p["resources"]["requests"]["memory"] == "8Gi"
    w_env = {e["name"]: e["value"] for e in w["env"]}
    p_env = {e["name"]: e["value"] for e in p["env"]}
    assert w_env["A"] == "1" and w_env["B"] == "x:y" and p_env["A"] == "1" and "B" not in p_env
    wt = tasks(job)["worker"]["template"]
    assert wt["metadata"]["labels"]["kwok/fail"] == "1"
    assert "kwok/fail" not in tasks(job)["ps"]["template"]["metadata"]["labels"]
    # The mesh opt-out of every pod beside the user's own annotation (docs/kfp.md, "Multi-user KFP").
    assert wt["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false", "note": "hi"}
    assert wt["spec"]["nodeSelector"] == {"gpu": "v100"}
    assert wt["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
        {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
    ]
    assert w["imagePullPolicy"] == "Always"
    # Kubernetes expands $(VAR) in args and turns $$ into $: escaped, the argument arrives as typed.
    assert w["args"] == ["--lr", "0.1", "--name=$$(id)"]
    defined = {e["name"]: e["value"] for e in w["env"]}
    assert [expand(a, defined) for a in w["args"]] == ["--lr", "0.1", "--name=$(id)"]
    assert w["ports"][0]["containerPort"] == 3333
    assert list(tasks(job)) == ["chief", "ps", "worker", "evaluator"]


def test_mpi_command_split_or_after_dashdash(capsys: pytest.CaptureFixture[str]) -> None:
    job = render(capsys, "mpi", "--name", "h", "--workers", "3", "--slots-per-worker", "2", "--command", "python3 hello.py 'a b'")
    assert container(job, "mpimaster")["args"] == ["python3", "hello.py", "a b"]
    assert tasks(job)["mpiworker"]["replicas"] == 3
    assert container(job, "mpimaster")["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    job = render(capsys, "mpi", "--name", "h", "--mpiexec-arg=-x", "--mpiexec-arg", "FOO", "--", "prog", "$HOME")
    assert [expand(a, {}) for a in container(job, "mpimaster")["args"]] == ["-x", "FOO", "prog", "$HOME"]


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["tf", "--name", "Bad_Name"], "--name"),
        (["tf", "--name", "m", "--workers", "0"], "--workers"),
        (["tf", "--name", "m", "--ps", "0"], "--ps"),
        (["tf", "--name", "m", "--min-available", "9"], "--min-available"),
        (["tf", "--name", "m", "--worker-cpu", "lots"], "--worker-cpu"),
        (["tf", "--name", "m", "--code-url", "ftp://x/"], "--code-url"),
        (["tf", "--name", "m", "--code-url", "http://x/a.tgz", "--code-sha256", "zz"], "--code-sha256"),
        (["tf", "--name", "m", "--env", "TF_CONFIG=x"], "--env"),
        (["tf", "--name", "m", "--env", "nokey"], "--env"),
        (["tf", "--name", "m", "--env", "nosuchtask:A=1"], "--env"),
        (["tf", "--name", "m", "--toleration", "justkey"], "--toleration"),
        (["tf", "--name", "m", "--label", "x"], "--label"),
        (["mpi", "--name", "h"], "--command"),
        (["mpi", "--name", "h", "--command", "a 'b"], "--command"),
        (["mpi", "--name", "h", "--command", "a", "--", "b"], "--command"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    assert main(["render", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(("vpipe: error: invalid ", "vpipe: error: missing ")) and flag in err
    assert len(err.strip().splitlines()) == 1


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["render", "tf", "--workers", "3"])  # --name missing
    assert info.value.code == 2
    assert "--name" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["train", "tf", "--name", "m", "--on-cancel", "explode"])
    assert info.value.code == 2


def test_train_dry_run_creates_nothing_and_needs_no_cluster(capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["train", "tf", "--name", "m", "--run-id", "r1", "--dry-run", "--json", "-q"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["phase"] == "DryRun" and result["created"] is False
    assert result["manifest"]["metadata"]["labels"]["volcano-pipelines/run"] == "r1"


def test_bad_timeout_rejected_before_connecting(capsys: pytest.CaptureFixture[str], tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert main(["train", "tf", "--name", "m", "--timeout", "-5", "-q"]) == 2
    assert "--timeout" in capsys.readouterr().err


def test_unreachable_cluster_exits_3(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))
    assert main(["train", "tf", "--name", "m", "--kubeconfig", str(kubeconfig), "-q"]) == 3
    err = capsys.readouterr().err
    assert "127.0.0.1:1" in err  # names the server it tried
    # A kubeconfig that is not there is bad input, not a cluster problem.
    assert main(["train", "tf", "--name", "m", "--kubeconfig", str(tmp_path / "nope"), "-q"]) == 2


def test_flag_for_maps_spec_paths_through_step_arguments() -> None:
    def tf(field: str) -> str | None:
        return flag_for(render_tf, param_for(field), TF_TASKS)

    assert param_for("worker.resources.gpu") == "gpus[worker]" and tf("worker.resources.gpu") == "--worker-gpus"
    assert flag_for(render_mpi, param_for("mpiworker.replicas"), MPI_TASKS) == "--workers"
    assert flag_for(render_mpi, param_for("mpimaster.resources.memory"), MPI_TASKS) == "--mpimaster-memory"
    assert tf("worker.env[A]") == "--env" and tf("worker.env name") == "--env"
    assert tf("job.image_pull_secrets[1]") == "--image-pull-secret"
    assert tf("job.ttl") == "--ttl"
    assert tf("args[0]") == "arguments after --"
    assert tf("unknown.thing") is None


def test_console_script_and_broken_pipe() -> None:
    proc = subprocess.run(
        f"{sys.executable} -m volcano_pipelines render tf --name m --workers 50 | head -1",
        shell=True, capture_output=True, text=True, timeout=60,
    )
    assert proc.stdout == "apiVersion: batch.volcano.sh/v1alpha1\n"
    assert "Traceback" not in proc.stderr
