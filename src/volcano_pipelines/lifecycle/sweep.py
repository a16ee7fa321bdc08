"""The reap sweeper: the one lifecycle component that talks to the cluster. It follows one
Volcano Job (the reap step after training) or sweeps every matching Volcano Job and classic
group (workers as batch/v1 Jobs, parameter servers as Deployments) in a namespace or the whole
cluster, forever or once; steps/_reap.py checks the step's arguments and runs it.

Event-driven: one list + watch per collection in scope (Volcano Jobs, pods, and for a sweep
batch/v1 Jobs and Deployments) feeds a local cache; every change re-runs the pure rule
(lifecycle/reap.py) on the cache, and timers wake the loop when a grace period ends.
No object is polled. Every "should we?" is answered by the rule; this module only lists,
watches, acts and records what it did."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from volcano_pipelines.deadline import Deadline
from volcano_pipelines.errors import InputError
from volcano_pipelines.lifecycle import reap as rule
from volcano_pipelines.outputs import WHOLE, Output
from volcano_pipelines.progress import Progress

__all__ = ["COMMAND_REASON", "EVENT_ABORTED", "EVENT_EXPIRED", "EVENT_REAPED", "ReapResult", "ReapedUnit", "Sweep"]

log = logging.getLogger(__name__)

COMMAND_REASON = "ParameterServersLinger"
EVENT_REAPED = "ParameterServersReaped"
EVENT_ABORTED = "WorkersFailedAborted"
EVENT_EXPIRED = "Expired"
# How often the loop looks at a stop request (SIGTERM) while nothing else happens.
STOP_CHECK_SECONDS = 1.0
# A pass decides about every unit, in time that grows with the pods (11,000 in one job at the
# seed's size), and pod events arrive by the thousand a minute while a large gang starts: one
# pass per burst cost 115 CPU-seconds in 7 minutes there. Passes come at most this often; a
# reap that falls due is at most this much later.
PASS_INTERVAL_SECONDS = 1.0
SWEEP_WATCH_WINDOW = 60


@dataclass
class ReapedUnit:
    """One job (or classic group, or expired Deployment) the step acted on or reported."""

    kind: str  # volcano | classic | expiry
    namespace: str
    name: str
    action: str  # completed | scaled | deleted | namespace-deleted | expired | aborted | reported | refused | would <...>
    reason: str
    completed_at: str | None = None  # when the completion task finished
    linger_seconds: float | None = None  # completion task finished -> parameter server pods gone
    ps_pods: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ReapResult:
    """What one run of the sweeper did: the reap step's result."""

    # The reap step's output parameters (the KFP component's; steps/registry.py reads them).
    OUTPUTS: ClassVar[tuple[Output, ...]] = (
        Output("succeeded", "the job ended (or had nothing to reap); false: its pods failed or the step timed out"),
        Output("ps_linger_seconds", "how long the parameter servers outlived the completion task (0 when unknown)",
               missing=0.0),
        Output("message", "what the step did", missing=""),
        Output("result", "the whole step result (ReapResult.to_dict())", WHOLE),
    )

    scope: str  # "job NS/NAME", "namespace NS selector S", "all namespaces selector S"
    succeeded: bool
    dry_run: bool = False
    reaped: list[ReapedUnit] = field(default_factory=list)  # finished (or, dry run, would finish)
    failed: list[ReapedUnit] = field(default_factory=list)  # workers failed: reported (or aborted), never reaped
    waiting: list[ReapedUnit] = field(default_factory=list)  # not due when the step ended (still training, in grace)
    message: str | None = None
    ps_linger_seconds: float | None = None  # one job: how long its parameter servers outlived the completion task

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("reaped", "failed", "waiting"):
            out[key] = [u.to_dict() for u in getattr(self, key)]
        return out


@dataclass
class _Acted:
    entry: ReapedUnit
    ps_uids: frozenset[str]
    completed_at: datetime | None
    gone: bool = False


class Sweep:
    """One run of the sweeper: the caches the informers fill, and the decisions taken on them."""

    def __init__(self, cluster: Any, *, namespace: str | None, job: str | None, selector: str | None, grace: float,
                 on_failure: str, completion_task: str | None, group_label: str | None, delete_deployment: bool,
                 delete_namespace: bool, once: bool, dry_run: bool, timeout: float | None, progress: Progress,
                 wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.job = job
        self.selector = selector
        self.grace = grace
        self.on_failure = on_failure
        self.completion_task = completion_task
        self.group_label = group_label
        self.delete_deployment = delete_deployment
        self.delete_namespace = delete_namespace
        self.once = once
        self.dry_run = dry_run
        self.timeout = timeout
        self.progress = progress
        self.wall = wall
        self.clock = clock
        self.stop = threading.Event()
        self.events: queue.Queue[tuple[str, str, Any]] = queue.Queue()
        self.caches: dict[str, dict[str, dict[str, Any]]] = {}
        self.synced: set[str] = set()
        self.acted: dict[tuple[str, str, str], _Acted] = {}
        self.reported: set[tuple[str, str, str]] = set()
        self.decisions: dict[tuple[str, str, str], tuple[rule.Unit, rule.Decision]] = {}
        self.result = ReapResult(scope=self._scope(), succeeded=True, dry_run=dry_run)
        self.passes = 0
        self.last_pass: float | None = None  # self.clock() at the last pass
        self.changed = False  # events applied since the last pass
        self.started_wall = wall()

    def _scope(self) -> str:
        if self.job:
            return f"job {self.namespace}/{self.job}"
        where = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        return f"{where}, selector {self.selector}"

    # ----- informers -----------------------------------------------------------------

    def _informers(self) -> list[Any]:
        from volcano_pipelines.k8s.apps import Informer, collection_path
        from volcano_pipelines.k8s.pods import slim_pod

        def make(key: str, api: str, plural: str, **selectors: str) -> Any:
            self.caches[key] = {}
            window = SWEEP_WATCH_WINDOW if not self.job else 20
            return Informer(self.cluster, key, collection_path(api, plural, self.namespace), self.events,
                            window=window, project=slim_pod if plural == "pods" else None, **selectors)

        volcano = "batch.volcano.sh/v1alpha1"
        if self.job:
            return [make("vjobs", volcano, "jobs", field_selector=f"metadata.name={self.job}"),
                    make("vpods", "v1", "pods", label_selector=f"{rule.VOLCANO_JOB_LABEL}={self.job}")]
        assert self.selector is not None
        return [make("vjobs", volcano, "jobs", label_selector=self.selector),
                make("vpods", "v1", "pods", label_selector=rule.VOLCANO_JOB_LABEL),
                make("bjobs", "batch/v1", "jobs", label_selector=self.selector),
                make("deploys", "apps/v1", "deployments", label_selector=self.selector),
                make("cpods", "v1", "pods", label_selector=self.selector)]

    def _apply(self, item: tuple[str, str, Any]) -> None:
        kind, key, payload = item
        if kind == "error":
            raise payload
        cache = self.caches[key]
        if kind == "sync":
            cache.clear()
            cache.update({_uid(o): o for o in payload})
            self.synced.add(key)
        elif kind == "DELETED":
            cache.pop(_uid(payload), None)
        else:
            cache[_uid(payload)] = payload

    def _pods(self) -> dict[str, dict[str, Any]]:
        return {**self.caches.get("vpods", {}), **self.caches.get("cpods", {})}

    # ----- the loop ------------------------------------------------------------------------

    def run(self) -> ReapResult:
        informers = [i.start() for i in self._informers()]
        log.info("reap: watching %s", self.result.scope)
        try:
            return self._loop()
        finally:
            for informer in informers:
                informer.stop()

    def _loop(self) -> ReapResult:
        deadline = Deadline.after(self.timeout or None, self.clock)
        while True:
            item: tuple[str, str, Any] | None
            try:
                item = self.events.get(timeout=self._wait_seconds(deadline))
            except queue.Empty:
                item = None
            while item is not None:
                self._apply(item)
                self.changed = True
                try:
                    item = self.events.get_nowait()
                except queue.Empty:
                    item = None
            if self.changed and any(not acted.gone for acted in self.acted.values()):
                # Between passes too: a reaped job's parameter servers gone are timed when seen
                # (linger_seconds), and seen before a stop that comes before the next pass.
                self._check_gone(self.wall())
            if self.stop.is_set():
                return self._end("stopped by a signal", succeeded=not self.job)
            timed_out = deadline.expired()
            if len(self.synced) < len(self.caches):
                if timed_out:
                    return self._end(f"timed out after {self.timeout:g}s before the first listing finished", succeeded=False)
                continue
            if not timed_out and self._seconds_to_next_pass() > 0:
                continue  # changes wait for the next pass (_wait_seconds wakes the loop for it)
            self.last_pass, self.changed = self.clock(), False
            done = self._evaluate()
            if done is not None:
                return done
            if timed_out:
                if not self.job and not self.once:
                    return self._end(f"swept for {self.timeout:g}s")
                return self._end(f"timed out after {self.timeout:g}s: " + self._waiting_text(), succeeded=False)

    def _seconds_to_next_pass(self) -> float:
        if self.last_pass is None:
            return 0.0
        return max(0.0, self.last_pass + PASS_INTERVAL_SECONDS - self.clock())

    def _wait_seconds(self, deadline: Deadline) -> float:
        wait = STOP_CHECK_SECONDS
        if self.changed:  # what arrived since the last pass is decided on at the next
            wait = min(wait, self._seconds_to_next_pass())
        now = self.wall()
        for _unit, decision in self.decisions.values():
            if decision.action == rule.GRACE and decision.due_at is not None:
                wait = min(wait, max(0.0, (decision.due_at - now).total_seconds()) + 0.05)
        wait = deadline.clamp(wait)
        return max(wait, 0.01)

    def _evaluate(self) -> ReapResult | None:
        """Decide about every unit in the caches; act on what is due. Returns the result when
        the step is over."""
        now = self.wall()
        self.passes += 1
        units = rule.group_units(self.caches["vjobs"].values(), self.caches.get("bjobs", {}).values(),
                                 self.caches.get("deploys", {}).values(), self._pods().values(),
                                 group_label=self.group_label)
        if self.job:
            units = [u for u in units if u.kind == "volcano" and u.name == self.job]
            if not units:
                return self._end(f"job {self.namespace}/{self.job} not found", succeeded=False)
        current = {u.key for u in units}
        for key in list(self.decisions):
            if key not in current:  # deleted: forget it (a long-running sweep keeps no state per old job)
                del self.decisions[key]
                self.reported.discard(key)
                if key in self.acted and self.acted[key].gone:
                    del self.acted[key]
        for unit in units:
            decision = rule.decide(unit, now=now, grace=self.grace, completion_task=self.completion_task,
                                   remove=self.delete_deployment or self.delete_namespace)
            previous = self.decisions.get(unit.key)
            self.decisions[unit.key] = (unit, decision)
            if previous is None or _gist(previous[1]) != _gist(decision):
                self._note(unit, decision)
            self._handle(unit, decision, now)
        self._check_gone(now)
        return self._finished()

    def _note(self, unit: rule.Unit, decision: rule.Decision) -> None:
        if self.job or decision.action not in (rule.WAIT, rule.DONE, rule.SKIP):
            line = f"{unit.describe()}: {decision.action}: {decision.reason}"
            log.info("%s", line)

    def _handle(self, unit: rule.Unit, decision: rule.Decision, now: datetime) -> None:
        key = unit.key
        if decision.action == rule.REAP and key not in self.acted:
            self._reap(unit, decision, now)
        elif decision.action == rule.FAILED and key not in self.reported:
            self._failed(unit, decision, now)
        elif decision.action == rule.SKIP and self.job:
            tasks = [t.get("name") for t in ((unit.obj or {}).get("spec") or {}).get("tasks") or []]
            raise InputError("completion_task", self.completion_task,
                             f"a task of job {unit.namespace}/{unit.name} ({', '.join(map(str, tasks))}): {decision.reason}")

    # ----- actions ------------------------------------------------------------------------

    def _reap(self, unit: rule.Unit, decision: rule.Decision, now: datetime) -> None:
        from volcano_pipelines.k8s import apps
        from volcano_pipelines.k8s import volcano as k8s_volcano

        live = self._live_ps(unit, decision)
        entry = ReapedUnit(kind=unit.kind, namespace=unit.namespace, name=unit.name, action="", reason=decision.reason,
                           completed_at=rule.format_time(decision.completed_at) if decision.completed_at else None,
                           ps_pods=sorted(_name(p) for p in live))
        if unit.kind == "volcano":
            verb = "completed"
            if not self.dry_run:
                assert unit.obj is not None
                k8s_volcano.send_command(self.cluster, dict(unit.obj), "CompleteJob", COMMAND_REASON)
                apps.record_event(self.cluster, _typed(unit.obj, "batch.volcano.sh/v1alpha1", "Job"), EVENT_REAPED,
                                  f"CompleteJob sent by volcano-pipelines reap: {decision.reason}", now=now)
        elif unit.kind == "expiry":
            verb = "expired"
            if not self.dry_run:
                assert unit.obj is not None
                apps.record_event(self.cluster, _typed(unit.obj, "apps/v1", "Deployment"), EVENT_EXPIRED,
                                  f"deleted by volcano-pipelines reap: {decision.reason}", now=now)
                apps.delete(self.cluster, "apps/v1", "Deployment", unit.namespace, unit.name)
        else:
            verb, refusal = self._end_servers(unit, decision, now, EVENT_REAPED)
            if refusal is not None:
                entry.action = "refused"
                entry.reason = refusal
                self.acted[unit.key] = _Acted(entry, frozenset(), decision.completed_at, gone=True)
                self.result.failed.append(entry)
                return
        entry.action = f"would {'complete' if verb == 'completed' else verb}" if self.dry_run else verb
        log.warning("%s %s: %s", "would reap" if self.dry_run else f"reaped ({verb})", unit.describe(), decision.reason)
        self.progress.note(f"{unit.describe()}: {entry.action}: {decision.reason}")
        gone = self.dry_run or not live or unit.kind == "expiry"
        self.acted[unit.key] = _Acted(entry, frozenset(_uid(p) for p in live), decision.completed_at, gone=gone)
        self.result.reaped.append(entry)

    def _end_servers(self, unit: rule.Unit, decision: rule.Decision, now: datetime, reason: str) -> tuple[str, str | None]:
        """Classic layout: scale the parameter server Deployments to zero, delete them, or
        delete the namespace (after checking that it holds only the job's objects). Returns
        (what was done, why it was refused or None)."""
        from volcano_pipelines.k8s import apps

        targets = [d for d in unit.servers if _name(d) in decision.lingering]
        if self.delete_namespace:
            assert self.selector is not None
            foreign = apps.foreign_objects(self.cluster, unit.namespace, self.selector)
            if foreign:
                shown = ", ".join(foreign[:10]) + (f" and {len(foreign) - 10} more" if len(foreign) > 10 else "")
                refusal = (f"not deleting namespace {unit.namespace}: it also holds objects not labelled "
                           f"{self.selector}: {shown}")
                log.warning("%s", refusal)
                self.progress.note(f"{unit.describe()}: refused: {refusal}")
                return "refused", refusal
            if not self.dry_run:
                apps.delete_namespace(self.cluster, unit.namespace)
            return "namespace-deleted", None
        for deployment in targets:
            if self.dry_run:
                continue
            typed = _typed(deployment, "apps/v1", "Deployment")
            if self.delete_deployment:
                apps.record_event(self.cluster, typed, reason, f"deleted by volcano-pipelines reap: {decision.reason}", now=now)
                apps.delete(self.cluster, "apps/v1", "Deployment", unit.namespace, _name(deployment))
            else:
                apps.scale_deployment(self.cluster, unit.namespace, _name(deployment), 0)
                apps.record_event(self.cluster, typed, reason, f"scaled to 0 by volcano-pipelines reap: {decision.reason}", now=now)
        return ("deleted" if self.delete_deployment else "scaled"), None

    def _failed(self, unit: rule.Unit, decision: rule.Decision, now: datetime) -> None:
        from volcano_pipelines.k8s import apps
        from volcano_pipelines.k8s import volcano as k8s_volcano

        self.reported.add(unit.key)
        entry = ReapedUnit(kind=unit.kind, namespace=unit.namespace, name=unit.name, action="reported",
                           reason=decision.reason, ps_pods=sorted(_name(p) for p in unit.pods if rule.is_live(p)))
        if self.on_failure == "abort":
            if self.dry_run:
                entry.action = "would abort"
            elif unit.kind == "volcano":
                assert unit.obj is not None
                entry.action = k8s_volcano.abort_job(self.cluster, dict(unit.obj), "WorkersFailed")
                apps.record_event(self.cluster, _typed(unit.obj, "batch.volcano.sh/v1alpha1", "Job"), EVENT_ABORTED,
                                  f"aborted by volcano-pipelines reap: {decision.reason}", event_type="Warning", now=now)
            elif unit.kind == "classic":
                lingering = rule.Decision(rule.REAP, decision.reason,
                                          lingering=tuple(_name(d) for d in unit.servers
                                                          if self.delete_deployment or _replicas(d) > 0))
                saved, self.delete_namespace = self.delete_namespace, False  # aborting never deletes a namespace
                try:
                    self._end_servers(unit, lingering, now, EVENT_ABORTED)
                finally:
                    self.delete_namespace = saved
                entry.action = "aborted"
        log.warning("%s: %s; %s", unit.describe(), decision.reason,
                    "not reaped" if entry.action == "reported" else entry.action)
        self.progress.note(f"{unit.describe()}: {entry.action}: {decision.reason}")
        self.result.failed.append(entry)

    def _live_ps(self, unit: rule.Unit, decision: rule.Decision) -> list[Mapping[str, Any]]:
        if unit.kind == "volcano":
            names = set(decision.lingering)
            return [p for p in unit.pods if _name(p) in names]
        if unit.kind == "classic":
            return [p for p in unit.pods if rule.is_live(p)]
        return []

    def _check_gone(self, now: datetime) -> None:
        pods = self._pods()
        for acted in self.acted.values():
            if acted.gone:
                continue
            if not acted.ps_uids & set(pods):
                acted.gone = True
                if acted.completed_at is not None:
                    acted.entry.linger_seconds = round((now - acted.completed_at).total_seconds(), 3)
                log.info("%s/%s: parameter servers gone (%s after the completion task finished)", acted.entry.namespace,
                         acted.entry.name, f"{acted.entry.linger_seconds}s" if acted.entry.linger_seconds is not None else "?")

    # ----- ending ---------------------------------------------------------------------------

    def _finished(self) -> ReapResult | None:
        pending_gone = any(not a.gone for a in self.acted.values())
        if self.job:
            unit, decision = next(iter(self.decisions.values()))
            if decision.action == rule.FAILED:
                what = self.result.failed[-1].action if self.result.failed else "reported"
                return self._end(f"{unit.describe()}: {decision.reason}" + ("" if what == "reported" else f"; job {what}"),
                                 succeeded=False)
            if self.dry_run:
                if unit.key not in self.acted:
                    self.result.waiting.append(_waiting(unit, decision))
                return self._end(f"dry run: {unit.describe()}: {decision.action}: {decision.reason}")
            if unit.key in self.acted:
                if not pending_gone:
                    return self._end(f"{unit.describe()}: parameter servers ended")
                return None
            if decision.action == rule.DONE:
                return self._end(f"{unit.describe()}: nothing to reap: {decision.reason}")
            return None
        if self.dry_run or self.once:
            # One sweep waits for what comes due within the grace period, not for a TTL days away.
            horizon = self.started_wall + timedelta(seconds=self.grace + 1)
            in_grace = [key for key, (_u, d) in self.decisions.items()
                        if d.action == rule.GRACE and key not in self.acted and d.due_at is not None and d.due_at <= horizon]
            if (self.dry_run or (not in_grace and not pending_gone)):
                for key, (unit, decision) in sorted(self.decisions.items()):
                    if key not in self.acted and decision.action in (rule.WAIT, rule.GRACE):
                        self.result.waiting.append(_waiting(unit, decision))
                return self._end(f"one sweep of {self.result.scope}: {len(self.result.reaped)} reaped, "
                                 f"{len(self.result.failed)} failed, {len(self.result.waiting)} not due")
        return None

    def _waiting_text(self) -> str:
        waiting = [f"{u.describe()}: {d.reason}" for u, d in self.decisions.values() if d.action in (rule.WAIT, rule.GRACE)]
        gone = [f"{a.entry.namespace}/{a.entry.name}: parameter servers not gone yet" for a in self.acted.values() if not a.gone]
        return "; ".join(waiting + gone) or "nothing seen"

    def _end(self, message: str, *, succeeded: bool = True) -> ReapResult:
        self.result.message = message
        self.result.succeeded = succeeded and self.result.succeeded
        if self.job and self.result.reaped:
            self.result.ps_linger_seconds = self.result.reaped[0].linger_seconds
        if not self.job and not self.once and not self.dry_run:
            for key, (unit, decision) in sorted(self.decisions.items()):
                if key not in self.acted and key not in self.reported and decision.action in (rule.WAIT, rule.GRACE):
                    self.result.waiting.append(_waiting(unit, decision))
        return self.result


def _gist(decision: rule.Decision) -> tuple[Any, ...]:
    """What makes a decision worth a new log line (not the seconds counting up in its reason)."""
    return (decision.action, decision.lingering, decision.due_at, decision.failed)


def _waiting(unit: rule.Unit, decision: rule.Decision) -> ReapedUnit:
    return ReapedUnit(kind=unit.kind, namespace=unit.namespace, name=unit.name, action=decision.action,
                      reason=decision.reason,
                      completed_at=rule.format_time(decision.completed_at) if decision.completed_at else None)


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


def _name(obj: Any) -> str:
    return str((obj.get("metadata") or {}).get("name", "?"))


def _replicas(deployment: Any) -> int:
    return int((deployment.get("spec") or {}).get("replicas", 1) or 0)


def _typed(obj: Any, api_version: str, kind: str) -> dict[str, Any]:
    """Watched objects carry apiVersion/kind; make sure an Event's involvedObject has them."""
    return {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": obj.get("kind") or kind}

