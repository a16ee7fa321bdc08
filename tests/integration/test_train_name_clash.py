"""A job name already taken by ANOTHER run, on the cluster path (issue 33: only the local backend
tested its own copy of this rule). Against the real control plane: a second run with the same
name and a different run id is refused (exit 2, naming the owner run) and the first run's job
is left exactly as it was; the same run id attaches to it instead of creating a second job."""

from __future__ import annotations

import pytest

from tests.cluster import behaviour
from tests.helpers.train_cluster import CODE_URL, Observer, _label_args, _vpipe

pytestmark = pytest.mark.integration


def test_a_name_taken_by_another_run_is_refused_and_the_same_run_attaches(cluster, namespace: str) -> None:
    seen = Observer(cluster, namespace)
    base = ["train", "tf", "--name", "clash", "--namespace", namespace, "--ps", "1", "--workers", "1",
            "--code-url", CODE_URL, "--no-wait", *_label_args("worker", behaviour.keep_running())]
    first = _vpipe(cluster, *base, "--run-id", "run-a")
    assert first.returncode == 0, first.stderr
    assert first.result is not None and first.result["created"] is True
    job = seen.job("clash")
    assert job is not None and job["metadata"]["labels"]["volcano-pipelines/run"] == "run-a"

    other = _vpipe(cluster, *base, "--run-id", "run-b")
    assert other.returncode == 2, other.stderr
    assert "invalid --name='clash'" in other.stderr and "belongs to run 'run-a'" in other.stderr, other.stderr
    after = seen.job("clash")
    assert after is not None and after["metadata"]["uid"] == job["metadata"]["uid"]
    assert after["metadata"]["labels"]["volcano-pipelines/run"] == "run-a"
    assert len(seen.jobs()) == 1

    same = _vpipe(cluster, *base, "--run-id", "run-a")
    assert same.returncode == 0, same.stderr
    assert same.result is not None and same.result["created"] is False
    assert [j["metadata"]["uid"] for j in seen.jobs()] == [job["metadata"]["uid"]]
