"""The objects the reap rules and the sweeper read (Volcano jobs, batch Jobs, Deployments, pods,
stamped as vpipe stamps them), a fixed now, and an in-memory sweep that records what it did."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from volcano_pipelines.lifecycle import reap as rule
from volcano_pipelines.lifecycle import sweep as sweeper
from volcano_pipelines.progress import Progress

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
UID = "job-uid-1"


def stamp(seconds: float) -> str:
    return rule.format_time(T0 + timedelta(seconds=seconds))


def vjob(phase: str = "Running", tasks: dict[str, int] | None = None, *, name: str = "j", policies: list | None = None,
         task_policies: dict[str, list] | None = None) -> dict[str, Any]:
    tasks = tasks if tasks is not None else {"ps": 1, "worker": 2}
    spec: dict[str, Any] = {"tasks": [{"name": t, "replicas": n, **({"policies": (task_policies or {})[t]} if t in (task_policies or {}) else {})}
                                      for t, n in tasks.items()]}
    if policies is not None:
        spec["policies"] = policies
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "uid": UID, "labels": {"app": "x"}},
            "spec": spec, "status": {"state": {"phase": phase}}}


def pod(name: str, task: str, phase: str, *, finished: float | None = None, job: str = "j", uid: str = UID,
        deleting: bool = False, exit_code: int = 0) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                            "labels": {"volcano.sh/job-name": job, "volcano.sh/task-spec": task},
                            "ownerReferences": [{"uid": uid, "kind": "Job"}]}
    if deleting:
        meta["deletionTimestamp"] = stamp(0)
    status: dict[str, Any] = {"phase": phase}
    if finished is not None:
        status["containerStatuses"] = [{"name": "c", "state": {"terminated": {"exitCode": exit_code, "finishedAt": stamp(finished)}}}]
    return {"metadata": meta, "status": status}


def trained(ps_phase: str = "Running", **kw: Any) -> list[dict[str, Any]]:
    return [pod("j-worker-0", "worker", "Succeeded", finished=10), pod("j-worker-1", "worker", "Succeeded", finished=20),
            pod("j-ps-0", "ps", ps_phase, **kw)]


def decide(job: dict, pods: list, at: float, grace: float = 30, **kw: Any) -> rule.Decision:
    return rule.decide_volcano(job, pods, now=T0 + timedelta(seconds=at), grace=grace, **kw)


def batch_job(name: str, state: str | None, *, completed: float | None = 0, group: str | None = "a") -> dict[str, Any]:
    labels = {"group": group} if group else {}
    status: dict[str, Any] = {}
    if state:
        status["conditions"] = [{"type": state, "status": "True", "lastTransitionTime": stamp(completed or 0)}]
    if state == "Complete" and completed is not None:
        status["completionTime"] = stamp(completed)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": labels},
            "status": status}


def deployment(name: str, replicas: int = 1, *, group: str | None = "a", labels: dict | None = None,
               annotations: dict | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"u-{name}", "labels": {**({"group": group} if group else {}), **(labels or {})}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}}}


def ps_pod(deployment_name: str, phase: str = "Running", *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{deployment_name}-abc", "namespace": "ns", "uid": f"p-{deployment_name}", "labels": {"app": deployment_name, "group": "a"}}
    if deleting:
        meta["deletionTimestamp"] = stamp(0)
    return {"metadata": meta, "status": {"phase": phase}}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []


class InMemorySweep(sweeper.Sweep):
    """The loop with its informers replaced by fixed listings."""

    def __init__(self, listings: dict[str, list[dict[str, Any]]], *, now: datetime, **options: Any) -> None:
        defaults: dict[str, Any] = {"namespace": "ns", "job": None, "selector": None, "grace": 30.0, "on_failure": "report",
                                    "completion_task": None, "group_label": None, "delete_deployment": False,
                                    "delete_namespace": False, "once": False, "dry_run": False, "timeout": 30.0}
        defaults.update(options)
        super().__init__(object(), progress=Progress(), wall=lambda: now, **defaults)
        self.listings = listings

    def _informers(self) -> list[Any]:
        sweep = self

        class Listed:
            def __init__(self, key: str) -> None:
                self.key = key
                sweep.caches[key] = {}

            def start(self) -> Listed:
                sweep.events.put(("sync", self.key, sweep.listings.get(self.key, [])))
                return self

            def stop(self) -> None:
                pass

        keys = ["vjobs", "vpods"] if self.job else ["vjobs", "vpods", "bjobs", "deploys", "cpods"]
        return [Listed(k) for k in keys]


def trained_job() -> dict[str, list]:
    return {"vjobs": [vjob()], "vpods": [pod("j-worker-0", "worker", "Succeeded", finished=10),
                                         pod("j-worker-1", "worker", "Succeeded", finished=20), pod("j-ps-0", "ps", "Running")]}
