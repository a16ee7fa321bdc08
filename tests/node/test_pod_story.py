"""What happened to each pod, on the real node (issues 29 and 30): pods evicted through the
Eviction API (the default grace period and none) restart the job, which rides through and
reports the restart with its cause; pods CompleteJob stops are no failures; a job evicted more
often than max_retry allows ends Failed saying so; a failing worker's post-mortem names it, its
exit code and its last log lines (those of a run the job's restart deleted too), and lists
every other pod. Real kubelet, real containers
(the trainer image running a small bash program), the train step in this process."""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.evict import Evictor
from tests.helpers.http_server import serve
from tests.helpers.training import placement
from tests.images.fixtures import Images
from volcano_pipelines.images import TF_TRAINER_IMAGE
from volcano_pipelines.steps import Connection, train_tf

pytestmark = [pytest.mark.integration, pytest.mark.realnode, pytest.mark.containers]

# Parameter servers serve until stopped; workers count seconds and end (or fail with
# $FAIL_CODE). Both exit promptly on SIGTERM, as training code should within its grace period.
STORY_SH = """#!/bin/bash
trap 'echo "$VPIPE_ROLE $VK_TASK_INDEX: SIGTERM, exiting"; exit 143' TERM
if [ "$VPIPE_ROLE" = ps ]; then while true; do sleep 1 & wait $!; done; fi
for i in $(seq 1 "${RUN_FOR:-20}"); do echo "$VPIPE_ROLE $VK_TASK_INDEX: step $i"; sleep 1 & wait $!; done
if [ -n "$FAIL_CODE" ]; then echo "$VPIPE_ROLE $VK_TASK_INDEX giving up: exit $FAIL_CODE" >&2; exit "$FAIL_CODE"; fi
echo "$VPIPE_ROLE $VK_TASK_INDEX: done"
"""


@pytest.fixture(scope="module")
def node(real_node: Any, images: Images) -> Any:
    """The real node with the trainer image in its containerd."""
    real_node.import_image(images.archive("trainer-tf"))
    return real_node


@pytest.fixture(scope="module")
def story_url(node: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("story")
    (root / "run.sh").write_text(STORY_SH)
    with serve(root, host=node.gateway_ip) as server:
        yield server.base + "/"


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VPIPE_POST_MORTEM_DIR", str(tmp_path / "post-mortem"))
    return tmp_path / "post-mortem"


def story(cluster: Any, namespace: str, node: Any, url: str, name: str, **kwargs: Any) -> Any:
    env = kwargs.pop("env", {"RUN_FOR": "20"})
    return train_tf(name, connection=Connection(str(cluster.kubeconfig)), namespace=namespace, image=TF_TRAINER_IMAGE,
                    code_url=url, env={"": env}, timeout=480, **placement(node), **kwargs)


@pytest.mark.parametrize("grace", [None, 0], ids=["default-grace", "grace-0"])
def test_an_evicted_worker_restarts_the_job_which_rides_through(cluster: Any, namespace: str, node: Any,
                                                                story_url: str, records: Path,
                                                                grace: int | None) -> None:
    name = "evict" if grace is None else "evict0"
    evictor = Evictor(cluster, namespace, f"{name}-worker-0", grace=grace)
    try:
        result = story(cluster, namespace, node, story_url, name, ps=1, workers=1, max_retry=3)
    finally:
        evictor.stop()
    assert evictor.evicted, "the worker was never evicted"
    assert result.succeeded and result.phase == "Completed", result.to_dict()
    assert result.retries == 1 and len(result.restarts) == 1, result.to_dict()
    [restart] = result.restarts
    assert (restart["pod"], restart["task"], restart["cause"]) == (f"{name}-worker-0", "worker", "evicted"), restart
    assert result.failure is None and result.message is None
    record = json.loads((records / namespace / f"{name}.json").read_text())
    assert record["restarts"][0]["cause"] == "evicted"


def test_pods_stopped_by_complete_job_are_no_failures(cluster: Any, namespace: str, node: Any,
                                                      story_url: str, records: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        result = story(cluster, namespace, node, story_url, "done", ps=1, workers=1, env={"RUN_FOR": "3"})
    assert result.succeeded and result.failure is None and result.restarts == [], result.to_dict()
    assert not [r.getMessage() for r in caplog.records if "exit code" in r.getMessage()]
    record = json.loads((records / namespace / "done.json").read_text())
    outcomes = {p["name"]: p["outcome"] for p in record["pods"]}
    assert outcomes["done-worker-0"] == "succeeded"
    assert outcomes["done-ps-0"] in ("stopped by the job", "running"), outcomes
    assert not any(p["failed"] for p in record["pods"]), outcomes


def test_a_job_evicted_more_often_than_max_retry_ends_failed_saying_so(cluster: Any, namespace: str,
                                                                        node: Any, story_url: str,
                                                                        records: Path) -> None:
    evictor = Evictor(cluster, namespace, "often-worker-0", grace=0, times=2, after=3.0)
    try:
        # The worker runs 120 s, not 20: the second eviction must come before it is done (CI24, a
        # loaded machine: the restarted worker finished first and the job Completed). The job
        # fails at that eviction, so this takes no longer when all goes as meant.
        result = story(cluster, namespace, node, story_url, "often", ps=1, workers=1, max_retry=2,
                       env={"RUN_FOR": "120"})
    finally:
        evictor.stop()
    assert not result.succeeded and result.phase == "Failed", result.to_dict()
    assert "restarted 1 time(s), max_retry 2 reached: last cause pod often-worker-0 (task worker) evicted" \
        in (result.message or ""), result.message


def test_a_failing_workers_post_mortem_names_it_with_its_log_and_lists_every_pod(
        cluster: Any, namespace: str, node: Any, story_url: str, records: Path) -> None:
    # max_retry 2: the first run fails and is restarted (Volcano deletes its pods, and their
    # logs with them); the second fails and ends the job.
    result = story(cluster, namespace, node, story_url, "boom", ps=1, workers=2, max_retry=2,
                   env={"RUN_FOR": "2", "FAIL_CODE": "3"})
    assert not result.succeeded and result.phase == "Failed", result.to_dict()
    assert result.post_mortem and "error" not in result.post_mortem, result.post_mortem
    record = json.loads((records / namespace / "boom.json").read_text())
    pods = {p["name"]: p for p in record["pods"]}
    assert {"boom-ps-0", "boom-worker-0", "boom-worker-1"} <= set(pods), sorted(pods)
    failed = [p for p in record["pods"] if p["failed"]]
    assert failed and all(p["outcome"] == "exit code 3" for p in failed), [(p["name"], p["outcome"]) for p in failed]
    logs = [line for p in failed if p["detail"] for c in p["containers"] for line in c["log"]]
    assert any("giving up: exit 3" in line for line in logs), logs
    # The first run's failed worker that set off the restart is gone, its log too (its
    # successor of the same name failed again); the record still shows its last lines, read by
    # the step's pod watch while it existed, under that pod and not its successor.
    assert result.restarts and result.restarts[0]["cause"] == "exit code 3", result.restarts
    cause = result.restarts[0]["pod"]
    same = [p for p in record["pods"] if p["name"] == cause]
    assert len(same) == 2, [(p["name"], p["created"], p["deleted"]) for p in record["pods"]]
    first = min(same, key=lambda p: p["created"])
    assert first["deleted"], first
    lines = [line for c in first["containers"] for line in c["log"]]
    if not any("giving up: exit 3" in line for line in lines):
        # The restart's deletion raced the read and won (CI saw it once in six runs, the machine
        # loaded): no lines then, and the record says so and why, rather than an empty log.
        lost = [n for n in record["notes"] if n.startswith(f"pod {cause}: last log lines not kept (")]
        assert lost and lines == [], (first, record["notes"])
        warnings.warn(f"the first failure's log was lost to the restart: {lost[0]}", stacklevel=1)
    text = (records / namespace / "boom.md").read_text()
    assert "exit code 3" in text and "giving up: exit 3" in text
    print(f"\nreal node: post-mortem of {len(pods)} pods, {record['bytes']} bytes in {result.post_mortem['seconds']}s")
