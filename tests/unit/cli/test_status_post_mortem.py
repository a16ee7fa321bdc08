"""`vpipe status JOB --post-mortem` reads a saved record: local files, so it needs no cluster.
Without `-n` the namespace is the one holding a record of that job (no kubeconfig needed);
records in two namespaces are a bad-input error naming both; with none, the kubeconfig
context's namespace is where it looks. No server is asked: nothing listens at the
kubeconfig's address."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.kubeconfigs import TEAM_CONTEXTS
from volcano_pipelines.cli import main
from volcano_pipelines.postmortem.save import DIR_ENV, namespaces_with_record, write_record


def _record(namespace: str, name: str, phase: str) -> dict[str, object]:
    return {"job": {"namespace": namespace, "name": name, "phase": phase, "retries": 1}, "pods": [],
            "restarts": [{"pod": f"{name}-ps-0", "cause": "evicted"}], "bytes": 10}


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "post-mortem"
    monkeypatch.setenv(DIR_ENV, str(directory))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # none: a cluster is never needed
    write_record(_record("team-a", "mnist", "Completed"), directory)
    return directory


def test_without_namespace_the_one_record_of_the_job_is_shown(records: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    assert main(["status", "mnist", "--post-mortem", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["namespace"], shown["phase"], shown["retries"]) == ("team-a", "Completed", 1)
    assert shown["post_mortem"]["json"] == str(records / "team-a" / "mnist.json")


def test_records_of_the_job_in_two_namespaces_ask_for_one(records: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_record(_record("team-b", "mnist", "Failed"), records)
    assert namespaces_with_record("mnist", records) == ["team-a", "team-b"]
    code = main(["status", "mnist", "--post-mortem"])
    err = capsys.readouterr().err
    assert code == 2 and "team-a, team-b" in err and "-n" in err and "Traceback" not in err, err
    # -n picks one.
    assert main(["status", "mnist", "--post-mortem", "-n", "team-b", "--json"]) == 0  # status reports, never fails
    assert json.loads(capsys.readouterr().out)["phase"] == "Failed"


def test_with_no_record_the_contexts_namespace_is_where_it_looked(
        records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(TEAM_CONTEXTS)
    code = main(["status", "other-job", "--post-mortem", "--kubeconfig", str(kubeconfig), "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert code != 0 and shown["phase"] == "NotFound" and shown["namespace"] == "team-a", shown
    assert str(records / "team-a" / "other-job.json") in shown["message"]


def test_with_no_record_and_no_kubeconfig_it_says_there_is_no_record(
        records: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["status", "other-job", "--post-mortem"])
    out, err = capsys.readouterr()
    assert code != 0 and "no post-mortem record of job default/other-job" in out + err, (out, err)
    assert "Kubernetes configuration" not in out + err and str(records) in out + err
