"""`vpipe tensorboard` and `vpipe reap` bad input: exit 2 naming the flag, before any cluster
is contacted (the kubeconfig named does not exist: had the flag been let through, the error
would name --kubeconfig)."""

from __future__ import annotations

import json
import re

import pytest

from volcano_pipelines.cli import main

NO_CLUSTER = ["--kubeconfig", "/nonexistent/kubeconfig"]


@pytest.mark.parametrize("argv, flag", [
    (["--name", "1tb", "--log-pvc", "logs"], "--name"),
    (["--name", "tb", "--log-pvc", "logs", "--logdir", "../up"], "--logdir"),
    (["--name", "tb", "--log-pvc", "logs", "--ttl", "0"], "--ttl"),
    (["--name", "tb", "--log-pvc", "logs", "--job", "Job!"], "--job"),
    (["--name", "tb", "--log-pvc", "logs", "--node-port", "70000"], "--node-port"),
    (["--name", "tb", "--log-pvc", "logs", "--service-type", "ClusterIP", "--node-port", "30001"], "--node-port"),
    (["--name", "tb", "--log-pvc", "logs", "--ingress-path", "tb"], "--ingress-path"),
    (["--name", "tb", "--log-pvc", "logs", "--ingress-path", "/"], "--ingress-path"),
    (["--name", "tb", "--log-pvc", "logs", "--ingress-host", "x.example"], "--ingress-host"),
    (["--name", "tb", "--log-pvc", "logs", "--node-address", "a b"], "--node-address"),
    (["--name", "tb", "--log-pvc", "logs", "--memory", "lots"], "--memory"),
    (["--name", "tb", "--log-pvc", "logs", "--label", "bad key=x"], "--label"),
    (["--name", "tb", "--log-pvc", "logs", "--timeout", "-1"], "--timeout"),
    (["--name", "tb", "--log-pvc", "logs", "--toleration", "dedicated"], "--toleration"),
    (["--name", "tb", "--log-pvc", "logs", "--toleration", "a=b:Sometimes"], "--toleration"),
    (["--name", "tb", "--log-pvc", "logs", "--node-selector", "pool=bad value"], "--node-selector"),
])
def test_bad_tensorboard_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    assert main(["tensorboard", *argv, *NO_CLUSTER]) == 2
    err = capsys.readouterr().err
    assert f"invalid {flag}=" in err and "Traceback" not in err


def test_choices_are_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["tensorboard", "--name", "tb", "--log-pvc", "logs", "--service-type", "LoadBalancer"])
    assert exit_.value.code == 2 and "--service-type" in capsys.readouterr().err


def test_tensorboard_dry_run_prints_the_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tensorboard", "--name", "tb", "--log-pvc", "logs", "--ttl", "60", "--dry-run", "--json", *NO_CLUSTER]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [m["kind"] for m in result["manifests"]] == ["Deployment", "Service"]
    assert result["expires_at"] and result["url"] is None


def test_tensorboard_lands_where_the_node_selector_and_tolerations_say(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tensorboard", "--name", "tb", "--log-pvc", "logs", "--node-selector", "pool=services",
            "--toleration", "dedicated=services:NoSchedule", "--toleration", "spot:NoExecute", "--dry-run", "--json"]
    assert main([*argv, *NO_CLUSTER]) == 0
    pod = json.loads(capsys.readouterr().out)["manifests"][0]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "services"}
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "services", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists", "effect": "NoExecute"},
    ]


@pytest.mark.parametrize("argv, flag", [
    (["j", "--selector", "app=x"], "JOB"),
    (["Bad_Job"], "JOB"),
    (["j", "--once"], "--once"),
    (["j", "--delete-namespace"], "--delete-namespace"),
    (["j", "--group-label", "app"], "--group-label"),
    (["j", "--grace", "-1"], "--grace"),
    (["j", "--completion-task", "Chief"], "--completion-task"),
    (["j", "--timeout", "0"], "--timeout"),
    (["--selector", "app in x"], "--selector"),
    (["--selector", "app=x", "-n", "ns", "--all-namespaces"], "--all-namespaces"),
    (["--selector", "app=x", "--delete-deployment", "--delete-namespace"], "--delete-deployment"),
    (["--selector", "app=x", "--delete-namespace", "--group-label", "g"], "--group-label"),
    (["--selector", "app=x", "--group-label", "bad key"], "--group-label"),
    (["j", "-n", "Bad"], "--namespace"),
])
def test_bad_reap_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], flag: str) -> None:
    assert main(["reap", *argv, *NO_CLUSTER]) == 2
    err = capsys.readouterr().err
    # A switch (--once) is named alone: `invalid --once: ...`, never `--once=True`.
    assert re.search(rf"invalid {re.escape(flag)}[=:]", err) and "=True" not in err and "Traceback" not in err, err
