"""When to finish a training job whose parameter servers outlive it (the reap step), as pure
functions: the objects the API returned in, one decision with its reason out. The watch loop
(lifecycle/sweep.py) only lists, watches and acts; every "should we?" is answered here, so each
rule is tested on dicts without a cluster.

Two layouts:

* a Volcano Job: its pods carry `volcano.sh/job-name` and `volcano.sh/task-spec`; the
  completion task is `chief` when the job has one, else `mpimaster`, else `worker` (or the
  task the caller names). Reaping sends the job a `CompleteJob` bus Command.
* the classic layout: workers as batch/v1 Jobs and parameter servers as Deployments, grouped
  by a label value (or one namespace per training). Every worker Job must be Complete;
  reaping scales the Deployments to zero (or deletes them, or the namespace).

A third kind of unit is a Deployment carrying the expiry annotation (a TensorBoard started
with a TTL): it is removed once the time has passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from volcano_pipelines.labels import EXPIRES_ANNOTATION, STEP_LABEL, VOLCANO_JOB_NAME_LABEL
from volcano_pipelines.volcano.slices import role_of
from volcano_pipelines.volcano.status import FINAL_PHASES, pod_task

__all__ = [
    "ACTIONS",
    "COMPLETION_TASKS",
    "DONE",
    "EXPIRES_ANNOTATION",
    "FAILED",
    "GRACE",
    "REAP",
    "SKIP",
    "WAIT",
    "Decision",
    "Unit",
    "decide",
    "decide_classic",
    "decide_expiry",
    "decide_volcano",
    "format_time",
    "group_units",
    "is_live",
    "parse_time",
    "pod_finished_at",
    "selector_matches",
]

Obj = Mapping[str, Any]

WAIT = "wait"  # the completion task has not finished yet
GRACE = "grace"  # it finished and parameter servers still run, but the grace period is not over
REAP = "reap"  # it finished and parameter servers still run after the grace period: finish the job
FAILED = "failed"  # a worker (or parameter server) failed: never reaped, reported
DONE = "done"  # nothing lingers (already finished, or being finished): nothing to do
SKIP = "skip"  # not something this rule applies to (no completion task, no workers)
ACTIONS = (WAIT, GRACE, REAP, FAILED, DONE, SKIP)

# The task whose success means "training is over", in order of preference.
COMPLETION_TASKS = ("chief", "mpimaster", "worker")
VOLCANO_JOB_LABEL = VOLCANO_JOB_NAME_LABEL
# Phases in which Volcano is already ending the job's pods.
FINISHING_PHASES = frozenset({"Completing", "Aborting", "Terminating"})
# A Deployment with this annotation (RFC 3339 UTC time) is removed by the sweeper once the
# time has passed: the TensorBoard step's `ttl`.
# Deployments our own lifecycle steps created are never parameter servers.
NOT_PARAMETER_SERVERS = frozenset({"tensorboard", "serve"})
_LIVE_POD_PHASES = frozenset({"Pending", "Running", "Unknown"})


@dataclass(frozen=True)
class Decision:
    action: str  # one of ACTIONS
    reason: str
    completed_at: datetime | None = None  # when the completion task's last pod (or worker Job) finished
    due_at: datetime | None = None  # GRACE: when the grace period ends
    lingering: tuple[str, ...] = ()  # what still runs: pod names (Volcano) or Deployment names (classic)
    failed: tuple[str, ...] = ()  # FAILED: the failed pods or worker Jobs


@dataclass(frozen=True)
class Unit:
    """One thing the rule decides about: a Volcano Job, a classic group, or an expiring
    Deployment, with the objects that belong to it."""

    kind: str  # "volcano" | "classic" | "expiry"
    namespace: str
    name: str  # job name; classic: "<label>=<value>", or "" for a whole namespace; expiry: Deployment name
    obj: Obj | None = None  # the Volcano Job or the expiring Deployment
    workers: tuple[Obj, ...] = ()  # classic: batch/v1 Jobs
    servers: tuple[Obj, ...] = ()  # classic: parameter server Deployments
    pods: tuple[Obj, ...] = field(default=())

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)

    def describe(self) -> str:
        if self.kind == "volcano":
            return f"job {self.namespace}/{self.name}"
        if self.kind == "expiry":
            return f"deployment {self.namespace}/{self.name}"
        return f"group {self.namespace}/{self.name}" if self.name else f"namespace {self.namespace}"


def parse_time(value: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, 'Z' or an offset) as an aware datetime."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def format_time(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_live(pod: Obj) -> bool:
    """Still running (or about to): not finished and nobody is deleting it yet."""
    return _phase(pod) in _LIVE_POD_PHASES and not _meta(pod).get("deletionTimestamp")


def pod_finished_at(pod: Obj) -> datetime | None:
    """When a finished pod's containers ended (the latest), else when it stopped being Ready."""
    status = pod.get("status") or {}
    ends = [
        parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for cs in status.get("containerStatuses") or []
    ]
    found = [t for t in ends if t is not None]
    if found:
        return max(found)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return parse_time(condition.get("lastTransitionTime"))
    return None


def _seconds(delta: timedelta) -> str:
    return f"{delta.total_seconds():.0f}s"


def _after_completion(completed_at: datetime, lingering: Sequence[str], what: str, now: datetime,
                      grace: float) -> Decision:
    due = completed_at + timedelta(seconds=grace)
    names = ", ".join(lingering[:5]) + (f" and {len(lingering) - 5} more" if len(lingering) > 5 else "")
    if now < due:
        return Decision(GRACE, f"{what} finished {_seconds(now - completed_at)} ago; {names} still run; "
                               f"grace period ends at {format_time(due)}",
                        completed_at=completed_at, due_at=due, lingering=tuple(lingering))
    return Decision(REAP, f"{what} finished at {format_time(completed_at)} ({_seconds(now - completed_at)} ago) "
                          f"and {names} still run", completed_at=completed_at, lingering=tuple(lingering))


def completion_task_of(job: Obj, named: str | None = None) -> str | None:
    tasks = [t.get("name") for t in (job.get("spec") or {}).get("tasks") or []]
    if named is not None:
        return named if named in tasks else None
    return next((t for t in COMPLETION_TASKS if t in tasks), None)


def decide_volcano(job: Obj, pods: Iterable[Obj], *, now: datetime, grace: float,
                   completion_task: str | None = None) -> Decision:
    """A Volcano Job and its pods. Pods of an earlier job of the same name (another uid) are
    ignored."""
    state = ((job.get("status") or {}).get("state") or {})
    phase = state.get("phase") or "Pending"
    if phase in FINAL_PHASES:
        return Decision(DONE, f"the job is {phase}")
    if phase in FINISHING_PHASES:
        return Decision(DONE, f"the job is {phase}: Volcano is already ending its pods")
    tasks = {t.get("name"): int(t.get("replicas") or 0) for t in (job.get("spec") or {}).get("tasks") or []}
    task = completion_task_of(job, completion_task)
    if task is None:
        wanted = completion_task or ", ".join(COMPLETION_TASKS)
        return Decision(SKIP, f"no completion task ({wanted}) among the job's tasks ({', '.join(map(str, tasks))})")
    if phase != "Running":
        return Decision(WAIT, f"the job is {phase}")
    uid = _meta(job).get("uid")
    own = [p for p in pods if _owned_by(p, uid)]
    failed_pods = [p for p in own if _phase(p) == "Failed"]
    handled = [p for p in failed_pods if _failure_policy(job, pod_task(p))]
    if handled:
        names = ", ".join(sorted(_meta(p).get("name", "?") for p in handled))
        return Decision(WAIT, f"pod(s) failed ({names}); Volcano acts on them per the job's PodFailed policy "
                              f"({_failure_policy(job, pod_task(handled[0]))})")
    failed = sorted(_meta(p).get("name", "?") for p in failed_pods)
    if failed:
        return Decision(FAILED, f"pod(s) failed: {', '.join(failed)}; a job whose pods failed is never reaped",
                        failed=tuple(failed))
    # The completion role's pods, of every task it is split over (worker, worker-s1, ...).
    members = sum(n for name, n in tasks.items() if role_of(str(name), (task,)) == task)
    done = [p for p in own if role_of(pod_task(p) or "", (task,)) == task and _phase(p) == "Succeeded"]
    if len(done) < members or not done:
        return Decision(WAIT, f"{len(done)}/{members} {task} pod(s) succeeded")
    finished = [t for t in (pod_finished_at(p) for p in done) if t is not None]
    completed_at = max(finished) if finished else now
    lingering = sorted(_meta(p).get("name", "?") for p in own if is_live(p))
    if not lingering:
        return Decision(DONE, f"the {task} task finished and nothing else runs", completed_at=completed_at)
    return _after_completion(completed_at, lingering, f"the {task} task", now, grace)


def _failure_policy(job: Obj, task: str | None) -> str | None:
    """The action Volcano takes on a failed pod of `task` (task policies first), if any."""
    spec = job.get("spec") or {}
    task_spec: Mapping[str, Any] = next((t for t in spec.get("tasks") or [] if t.get("name") == task), {})
    for policies in (task_spec.get("policies") or [], spec.get("policies") or []):
        for policy in policies:
            events = [policy.get("event")] + list(policy.get("events") or [])
            if ("PodFailed" in events or "*" in events) and policy.get("action"):
                return str(policy["action"])
    return None


def _owned_by(obj: Obj, uid: str | None) -> bool:
    owners = _meta(obj).get("ownerReferences") or []
    return uid is None or not owners or any(o.get("uid") == uid for o in owners)


def _condition(obj: Obj, kind: str) -> Mapping[str, Any] | None:
    conditions: list[Mapping[str, Any]] = (obj.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against labels; an empty selector
    matches nothing (as a Deployment's would never be)."""
    if not selector:
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for expr in expressions:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _deployment_pods(deployment: Obj, pods: Iterable[Obj]) -> list[Obj]:
    selector = (deployment.get("spec") or {}).get("selector")
    namespace = _meta(deployment).get("namespace")
    return [p for p in pods if _meta(p).get("namespace") == namespace and selector_matches(selector, _labels(p))]


def decide_classic(workers: Sequence[Obj], servers: Sequence[Obj], pods: Iterable[Obj], *, now: datetime,
                   grace: float, remove: bool = False) -> Decision:
    """Workers as batch/v1 Jobs, parameter servers as Deployments. `remove`: the action
    deletes the Deployments (so an existing one at zero replicas still lingers)."""
    if not workers:
        return Decision(SKIP, "no batch/v1 Jobs (workers) in the group")
    failed = sorted(_meta(j).get("name", "?") for j in workers
                    if _condition(j, "Failed") or _condition(j, "FailureTarget"))
    if failed:
        return Decision(FAILED, f"worker Job(s) failed: {', '.join(failed)}; a group whose workers failed is never "
                                "reaped", failed=tuple(failed))
    complete = [j for j in workers if _condition(j, "Complete")]
    if len(complete) < len(workers):
        return Decision(WAIT, f"{len(complete)}/{len(workers)} worker Job(s) complete")
    ends = []
    for j in complete:
        condition = _condition(j, "Complete") or {}
        ends.append(parse_time((j.get("status") or {}).get("completionTime")) or parse_time(condition.get("lastTransitionTime")))
    known = [t for t in ends if t is not None]
    completed_at = max(known) if known else now
    pod_list = list(pods)
    lingering = sorted(
        _meta(d).get("name", "?") for d in servers
        if remove or int((d.get("spec") or {}).get("replicas", 1) or 0) > 0
    )
    if not lingering:
        running = sorted(_meta(p).get("name", "?") for d in servers for p in _deployment_pods(d, pod_list) if is_live(p))
        note = f"; {len(running)} pod(s) still stopping" if running else ""
        what = "no parameter server Deployments" if not servers else "the parameter servers are scaled to zero"
        return Decision(DONE, f"the worker Jobs are complete and {what}{note}", completed_at=completed_at)
    return _after_completion(completed_at, lingering, "the worker Jobs", now, grace)


def decide_expiry(deployment: Obj, *, now: datetime) -> Decision:
    raw = (_meta(deployment).get("annotations") or {}).get(EXPIRES_ANNOTATION)
    expires = parse_time(raw)
    if expires is None:
        return Decision(SKIP, f"annotation {EXPIRES_ANNOTATION}={raw!r} is not an RFC 3339 time")
    name = _meta(deployment).get("name", "?")
    if now < expires:
        return Decision(GRACE, f"expires at {format_time(expires)}", due_at=expires, lingering=(name,))
    return Decision(REAP, f"expired at {format_time(expires)}", completed_at=expires, lingering=(name,))


def decide(unit: Unit, *, now: datetime, grace: float, completion_task: str | None = None,
           remove: bool = False) -> Decision:
    if unit.kind == "volcano":
        assert unit.obj is not None
        return decide_volcano(unit.obj, unit.pods, now=now, grace=grace, completion_task=completion_task)
    if unit.kind == "expiry":
        assert unit.obj is not None
        return decide_expiry(unit.obj, now=now)
    return decide_classic(unit.workers, unit.servers, unit.pods, now=now, grace=grace, remove=remove)


def _is_server(deployment: Obj) -> bool:
    annotations = _meta(deployment).get("annotations") or {}
    return EXPIRES_ANNOTATION not in annotations and _labels(deployment).get(STEP_LABEL) not in NOT_PARAMETER_SERVERS


def group_units(volcano_jobs: Iterable[Obj], batch_jobs: Iterable[Obj], deployments: Iterable[Obj],
                pods: Iterable[Obj], *, group_label: str | None = None) -> list[Unit]:
    """Everything a sweep decides about, from what its watches hold. Classic groups are keyed
    by (namespace, value of `group_label`), or by namespace alone; objects without the group
    label are not part of any group."""
    pod_list = list(pods)
    volcano_pods: dict[tuple[str, str], list[Obj]] = {}
    other_pods: dict[str, list[Obj]] = {}
    for pod in pod_list:
        ns = _meta(pod).get("namespace", "")
        job_name = _labels(pod).get(VOLCANO_JOB_LABEL)
        if job_name:
            volcano_pods.setdefault((ns, job_name), []).append(pod)
        else:
            other_pods.setdefault(ns, []).append(pod)
    units: list[Unit] = []
    for job in volcano_jobs:
        ns, name = _meta(job).get("namespace", ""), _meta(job).get("name", "")
        units.append(Unit("volcano", ns, name, obj=job, pods=tuple(volcano_pods.get((ns, name), ()))))

    def group_of(obj: Obj) -> str | None:
        if group_label is None:
            return ""
        value = _labels(obj).get(group_label)
        return None if value is None else f"{group_label}={value}"

    groups: dict[tuple[str, str], tuple[list[Obj], list[Obj]]] = {}
    for job in batch_jobs:
        key = group_of(job)
        if key is not None:
            groups.setdefault((_meta(job).get("namespace", ""), key), ([], []))[0].append(job)
    for deployment in deployments:
        ns = _meta(deployment).get("namespace", "")
        if not _is_server(deployment):
            if EXPIRES_ANNOTATION in (_meta(deployment).get("annotations") or {}):
                units.append(Unit("expiry", ns, _meta(deployment).get("name", ""), obj=deployment))
            continue
        key = group_of(deployment)
        if key is not None:
            groups.setdefault((ns, key), ([], []))[1].append(deployment)
    for (ns, key), (workers, servers) in sorted(groups.items()):
        if not workers:
            continue  # Deployments alone are not a training group
        group_pods = [p for d in servers for p in _deployment_pods(d, other_pods.get(ns, []))]
        units.append(Unit("classic", ns, key, workers=tuple(workers), servers=tuple(servers), pods=tuple(group_pods)))
    return units


def split_selector(text: str) -> list[str]:
    """The requirements of a label selector string (commas inside `in (...)` kept)."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts
