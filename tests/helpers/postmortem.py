"""A failed Volcano job and its pods as the API returns them, for the post-mortem tests."""

from __future__ import annotations

from typing import Any

JOB = {
    "metadata": {"name": "mnist", "namespace": "team", "uid": "j-uid", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"queue": "vpipe", "maxRetry": 3, "tasks": [{"name": "ps", "replicas": 1}, {"name": "worker", "replicas": 2}]},
    "status": {"state": {"phase": "Terminated", "lastTransitionTime": "2026-01-01T00:02:00Z"}, "retryCount": 0,
               "conditions": [{"status": "Pending", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                              {"status": "Running", "lastTransitionTime": "2026-01-01T00:00:20Z"},
                              {"status": "Terminating", "lastTransitionTime": "2026-01-01T00:01:50Z"},
                              {"status": "Terminated", "lastTransitionTime": "2026-01-01T00:02:00Z"}]},
}


SECRET = "hunter2-do-not-copy"


def pod(task: str, index: int, *, phase: str, exit_code: int | None = None, reason: str = "Error",
        deleting: bool = False) -> dict[str, Any]:
    name = f"mnist-{task}-{index}"
    container: dict[str, Any] = {"name": "tensorflow", "restartCount": 0, "image": "vpipe/tf:1"}
    if exit_code is None:
        container["state"] = {"running": {"startedAt": "2026-01-01T00:00:20Z"}}
    else:
        container["state"] = {"terminated": {"exitCode": exit_code, "reason": reason,
                                             "startedAt": "2026-01-01T00:00:20Z", "finishedAt": "2026-01-01T00:01:48Z"}}
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "creationTimestamp": "2026-01-01T00:00:10Z",
                            "annotations": {"volcano.sh/task-spec": task}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:01:55Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": "node-1", "containers": [{"name": "tensorflow", "image": "vpipe/tf:1",
                                                       "env": [{"name": "TOKEN", "value": SECRET}]}]},
        "status": {"phase": phase, "startTime": "2026-01-01T00:00:15Z", "containerStatuses": [container],
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"},
                                  {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:01:48Z",
                                   "reason": "PodFailed"}]},
    }
