"""The reap step's informer keeps what it reads of each pod, not the whole pod: at 11,001 pods
it held every whole pod (22 KB of JSON each, the entry script in every container) and passed
1 GB. The list's pages and the watch's events both go through the projection."""

from __future__ import annotations

import json
import queue
from typing import Any

import pytest

from volcano_pipelines.k8s import apps
from volcano_pipelines.k8s.pods import slim_pod

FAT_POD = {
    "metadata": {"name": "j-ps-0", "uid": "u0", "labels": {"volcano.sh/job-name": "j"}, "managedFields": [{"big": "x" * 100}]},
    "spec": {"nodeName": "n1", "containers": [{"name": "tensorflow", "image": "tf", "env": [{"name": "VPIPE_ENTRY_SCRIPT",
                                                                                              "value": "x" * 20_000}]}]},
    "status": {"phase": "Running"},
}


class Raw:
    def release_conn(self) -> None:
        pass


class FakeApi:
    def call_api(self, *args: Any, **kwargs: Any) -> tuple[Raw, int, dict[str, str]]:
        return Raw(), 200, {}


class FakeCluster:
    api = FakeApi()


def test_the_list_and_the_watch_keep_the_projection_of_each_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [{"items": [FAT_POD], "metadata": {"continue": "t"}}, {"items": [FAT_POD], "metadata": {"resourceVersion": "7"}}]
    monkeypatch.setattr(apps, "request", lambda *args, **kwargs: pages.pop(0))
    lines = [json.dumps({"type": "MODIFIED", "object": FAT_POD}), json.dumps({"type": "BOOKMARK", "object": {"metadata": {}}})]
    monkeypatch.setattr(apps, "iter_resp_lines", lambda raw: iter(lines))
    informer = apps.Informer(FakeCluster(), "vpods", "/api/v1/namespaces/ns/pods", queue.Queue(),  # type: ignore[arg-type]
                             label_selector="volcano.sh/job-name=j", project=slim_pod)

    (listed,), version = informer._list()
    assert version == "7" and listed[0] == "sync" and listed[1] == [slim_pod(FAT_POD)] * 2
    watched = [event for event, _ in informer._watch("7")]
    assert watched == [("MODIFIED", slim_pod(FAT_POD)), None]
    kept = json.dumps(watched[0][1])  # type: ignore[index]
    assert "VPIPE_ENTRY_SCRIPT" not in kept and "managedFields" not in kept and len(kept) < 1_000


def test_without_a_projection_the_objects_are_kept_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apps, "request", lambda *args, **kwargs: {"items": [FAT_POD], "metadata": {"resourceVersion": "1"}})
    informer = apps.Informer(FakeCluster(), "deploys", "/apis/apps/v1/deployments", queue.Queue())  # type: ignore[arg-type]
    (listed,), _ = informer._list()
    assert listed[1] == [FAT_POD]


@pytest.mark.parametrize(("job", "selector"), [("j", None), (None, "team=a")])
def test_the_reap_sweeper_keeps_slim_pods_and_whole_jobs_and_deployments(job: str | None, selector: str | None) -> None:
    from volcano_pipelines.lifecycle.sweep import Sweep
    from volcano_pipelines.progress import Progress

    sweep = Sweep(FakeCluster(), namespace="ns", job=job, selector=selector, grace=0, on_failure="report",
                  completion_task=None, group_label=None, delete_deployment=False, delete_namespace=False, once=True,
                  dry_run=True, timeout=None, progress=Progress())
    informers = sweep._informers()
    assert informers and all((i.project is slim_pod) == i.path.endswith("/pods") for i in informers), \
        [(i.path, i.project) for i in informers]
