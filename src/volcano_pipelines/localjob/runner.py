"""Volcano's job controller for one job on this machine: gang start, the job's and its tasks'
policies (TaskCompleted / PodFailed -> CompleteJob / RestartJob / TerminateJob / AbortJob),
`maxRetry`, abort and delete, with the job's status kept in Volcano's own JSON shape.

One thread per job applies every decision (`_run`); the pods' waiter threads only record an
exit and queue it. Readers (watch, pods, ...) take snapshots under the same lock."""

from __future__ import annotations

import copy
import functools
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from volcano_pipelines.errors import InputError
from volcano_pipelines.localjob import plan as planning
from volcano_pipelines.localjob.files import write_whole
from volcano_pipelines.localjob.ports import free_port
from volcano_pipelines.localjob.processes import PodProcess, stop_pods, supervised_popen
from volcano_pipelines.labels import VOLCANO_JOB_NAME_LABEL, VOLCANO_TASK_LABEL

# The fetch program the container's script runs (entrypoint.py keeps it private; see the report).
from volcano_pipelines.volcano.entrypoint import FETCH_PY
from volcano_pipelines.volcano.status import restarts_made
from volcano_pipelines.volcano.report_lines import reporting_pod

log = logging.getLogger(__name__)

SUPPORTED_ACTIONS = frozenset({"CompleteJob", "RestartJob", "TerminateJob", "AbortJob"})
# A container that could not start: what Kubernetes reports (containerd's StartError).
START_ERROR_EXIT_CODE = 128
PARAMETER_SERVER_TASK = "ps"
# Tasks the backend never runs itself (evaluated before anything starts): a real sshd.
STANDIN_SCRIPT = str(Path(planning.__file__).with_name("sshd_standin.py"))


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def validate(manifest: Mapping[str, Any]) -> None:
    """What the local backend cannot run, refused before anything is created."""
    spec = manifest.get("spec") or {}
    tasks = spec.get("tasks") or []
    if not tasks:
        raise InputError("spec.tasks", tasks, "at least one task")
    if spec.get("minSuccess") is not None:
        # Only a role split over several tasks has it (volcano/tf.py): thousands of workers.
        raise InputError("spec.minSuccess", spec["minSuccess"], "no minSuccess on the local backend, which completes a "
                         "job by its tasks' policies only (use fewer workers, or a chief, to run it here)")
    for where, policies in [("spec.policies", spec.get("policies") or [])] + [
        (f"spec.tasks[{i}].policies", t.get("policies") or []) for i, t in enumerate(tasks)
    ]:
        for policy in policies:
            if policy.get("action") not in SUPPORTED_ACTIONS:
                raise InputError(f"{where}.action", policy.get("action"), "one of " + ", ".join(sorted(SUPPORTED_ACTIONS)))
    name = manifest["metadata"]["name"]
    uids = {planning.pod_name(name, t, i): "check" for t, n in planning.tasks_of(manifest) for i in range(n)}
    layout = planning.Layout(data_dir="/d", log_dir="/l", pvc_root="/p", svc_dir="/s", pods_dir="/o")
    planning.plan_job(manifest, layout, pod_uids=uids, base_env={}, python="python3", sshd_standin="s",
                      allocate_port=lambda: 0)


@dataclass
class PodRecord:
    """One pod of one attempt, as Kubernetes would report it."""

    plan: planning.ReplicaPlan
    uid: str
    attempt: int
    created_at: float
    log_path: Path
    process: PodProcess | None = None
    phase: str = "Pending"
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    stopped_by: str | None = None  # the job action that deleted it while it ran
    stopped_at: float | None = None  # when that action deleted it (its deletionTimestamp less the grace period)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Paths:
    job_dir: Path  # the job's own files: job.json, svc files, pods' emptyDirs
    pod_logs: Path  # one file per pod and attempt
    data_dir: Path
    log_dir: Path
    pvc_root: Path


class JobRunner:
    def __init__(
        self,
        manifest: Mapping[str, Any],
        paths: Paths,
        *,
        write_line: Callable[[str], None],
        grace_seconds: float,
        base_env: Mapping[str, str],
        clock: Callable[[], float] = time.time,
        on_done: Callable[[], None] | None = None,
    ) -> None:
        """`on_done` is called once the job has ended and every process of it is gone."""
        self.paths = paths
        self._on_done = on_done
        self._hurry = threading.Event()
        self._write_line = write_line
        self._grace_seconds = grace_seconds
        self._base_env = dict(base_env)
        self._clock = clock
        self._cond = threading.Condition()
        self._events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._preflight_proc: subprocess.Popen[bytes] | None = None
        self._persist_lock = threading.Lock()
        now = clock()
        job = copy.deepcopy(dict(manifest))
        job["metadata"] = {
            **job["metadata"],
            "namespace": job["metadata"].get("namespace", "default"),
            "uid": str(uuid.uuid4()),
            "creationTimestamp": rfc3339(now),
            "generation": 1,
            "resourceVersion": "1",
        }
        job["status"] = {
            "state": {"phase": "Pending", "lastTransitionTime": rfc3339(now)},
            "minAvailable": int(job["spec"].get("minAvailable") or 0),
            "retryCount": 0,
            "taskStatusCount": {},
            "conditions": [{"status": "Pending", "lastTransitionTime": rfc3339(now)}],
        }
        self._job = job
        self.version = 1
        self.deleted = False
        self.pods: dict[str, PodRecord] = {}  # this attempt's pods by name
        self.history: list[PodRecord] = []  # every pod of every attempt
        self.failed: list[dict[str, Any]] = []  # pod dicts, as each failed
        self.linger: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"job-{self.name}", daemon=True)

    # --- identity and snapshots (any thread)

    @property
    def name(self) -> str:
        return str(self._job["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self._job["metadata"]["namespace"])

    @property
    def labels(self) -> dict[str, str]:
        return dict(self._job["metadata"].get("labels") or {})

    @property
    def phase(self) -> str:
        with self._cond:
            return str(self._job["status"]["state"]["phase"])

    @property
    def condition(self) -> threading.Condition:
        return self._cond

    def snapshot(self) -> dict[str, Any]:
        with self._cond:
            return copy.deepcopy(self._job)

    def start(self) -> None:
        self.paths.job_dir.mkdir(parents=True, exist_ok=True)
        self._persist()
        self._thread.start()

    def wait_done(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    # --- commands (any thread); they return once every process is gone

    def abort(self, reason: str) -> None:
        self._command(("abort", reason))

    def delete(self) -> None:
        self._command(("delete",))
        with self._cond:
            self.deleted = True
            self._cond.notify_all()

    def restart(self, reason: str) -> None:
        """Volcano's RestartJob Command (what `vcctl job restart` sends): every pod is stopped
        and the job starts again, counted in retryCount like any restart. Returns at once."""
        if not self._done.is_set():
            self._events.put(("restart", reason))

    def hurry(self) -> None:
        """Pods being stopped are killed now, without the rest of their grace period."""
        self._hurry.set()

    def _command(self, event: tuple[Any, ...]) -> None:
        if self._done.is_set():
            return
        self._events.put(event)
        self._cancel.set()
        proc = self._preflight_proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the fetch and its shim (one session)
            except (ProcessLookupError, PermissionError):
                pass
        # Generous: every pod gets its grace period at once, then SIGKILL.
        self._done.wait(self._grace_seconds + 120)

    # --- pods as Kubernetes shows them

    def pod_dicts(self) -> list[dict[str, Any]]:
        with self._cond:
            return [self._pod_dict(r) for r in self.pods.values() if r.stopped_by is None]

    def failed_pods(self) -> list[dict[str, Any]]:
        with self._cond:
            return copy.deepcopy(self.failed)

    def log_path(self, pod: str) -> Path | None:
        with self._cond:
            for record in reversed(self.history):
                if record.plan.pod == pod:
                    return record.log_path
        return None

    def replicas(self) -> list[dict[str, Any]]:
        """Every pod of every attempt as this backend ran it (pids, times, who stopped it)."""
        with self._cond:
            return [
                {
                    "pod": r.plan.pod,
                    "task": r.plan.task,
                    "index": r.plan.index,
                    "attempt": r.attempt,
                    "uid": r.uid,
                    "pid": r.process.pid if r.process else None,
                    "phase": r.phase,
                    "exit_code": r.exit_code,
                    "started_at": r.started_at,
                    "finished_at": r.finished_at,
                    "stopped_by": r.stopped_by,
                    "log": str(r.log_path),
                    "argv": list(r.plan.argv),
                    "env": dict(r.plan.env),
                    "cwd": r.plan.cwd,
                }
                for r in self.history
            ]

    def _pod_dict(self, r: PodRecord) -> dict[str, Any]:
        container = {"name": (self._template(r.plan.task)["spec"]["containers"][0]).get("name", "main")}
        if r.phase == "Pending":
            state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
        elif r.phase == "Running":
            state = {"running": {"startedAt": rfc3339(r.started_at or r.created_at)}}
        else:
            terminated: dict[str, Any] = {
                "exitCode": r.exit_code,
                "reason": r.reason,
                "startedAt": rfc3339(r.started_at or r.created_at),
                "finishedAt": rfc3339(r.finished_at or r.created_at),
            }
            if r.message:
                terminated["message"] = r.message
            state = {"terminated": terminated}
        status: dict[str, Any] = {
            "phase": r.phase,
            "podIP": planning.LOCAL_ADDRESS,
            "hostIP": planning.LOCAL_ADDRESS,
            "containerStatuses": [{**container, "ready": r.phase == "Running", "restartCount": 0, "state": state}],
        }
        if r.started_at is not None:
            status["startTime"] = rfc3339(r.started_at)
        if r.phase == "Failed" and r.reason == "StartError":
            status["reason"], status["message"] = r.reason, r.message
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": r.plan.pod,
                "namespace": self.namespace,
                "uid": r.uid,
                "creationTimestamp": rfc3339(r.created_at),
                "labels": dict(r.labels),
                "annotations": dict(r.annotations),
                # Deleted by the job: when, as Kubernetes says it (the request's time plus the grace period).
                **({"deletionTimestamp": rfc3339(r.stopped_at + self._grace_seconds),
                    "deletionGracePeriodSeconds": int(self._grace_seconds)} if r.stopped_at is not None else {}),
            },
            "spec": {"hostname": r.plan.pod, "subdomain": self.name, "containers": [container]},
            "status": status,
        }

    # --- the controller (the job's own thread)

    def _run(self) -> None:
        try:
            self._attempts()
        except Exception as err:  # a local failure ends the job with its reason, never a hung step
            if isinstance(err, OSError):  # a full or read-only disk: one line, no traceback
                log.error("local job %s/%s: %s", self.namespace, self.name, err)
            else:
                log.exception("local job %s/%s", self.namespace, self.name)
            self._stop(list(self.pods.values()), "Error")
            self._transition("Failed", "LocalBackendError", f"the local backend failed: {err}")
        finally:
            # on_done (frees the job's name) first: a delete's wait then returns with the name free.
            try:
                if self._on_done is not None:
                    self._on_done()
            finally:
                self._done.set()
                with self._cond:
                    self._cond.notify_all()

    def _attempts(self) -> None:
        while True:
            attempt = int(self._job["status"]["retryCount"])
            if self._handle_command():
                return
            plans = self._plan(attempt)
            problem = self._preflight(plans, attempt)
            if self._handle_command():
                return
            if problem is not None:
                self._start_failed(*problem, attempt=attempt)
                return
            problem = self._start(plans, attempt)
            if problem is not None:
                self._start_failed(*problem, attempt=attempt)
                return
            self._transition("Running")
            if self._supervise(attempt) != "restart":
                return

    def _handle_command(self) -> bool:
        """A command that arrived while no pod ran; True when it ended the job. Exits of an
        earlier attempt's pods may be queued before it."""
        if not self._cancel.is_set():
            return False
        while True:
            event = self._events.get()
            if event[0] not in ("exit", "restart"):
                return self._apply_command(event)

    def _apply_command(self, event: tuple[Any, ...]) -> bool:
        if event[0] == "abort":
            self._end("Aborting", "Aborted", "AbortJob", "AbortJob", event[1])
            return True
        if event[0] == "delete":
            self._stop(list(self.pods.values()), "DeleteJob")
            return True
        return False

    def _plan(self, attempt: int) -> list[planning.ReplicaPlan]:
        attempt_dir = self.paths.job_dir / f"attempt-{attempt}"
        layout = planning.Layout(
            data_dir=str(self.paths.data_dir),
            log_dir=str(self.paths.log_dir),
            pvc_root=str(self.paths.pvc_root),
            svc_dir=str(self.paths.job_dir / "etc-volcano"),
            pods_dir=str(attempt_dir / "pods"),
        )
        names = [planning.pod_name(self.name, t, i) for t, n in planning.tasks_of(self._job) for i in range(n)]
        uids = {pod: str(uuid.uuid4()) for pod in names}
        plans = planning.plan_job(self._job, layout, pod_uids=uids, base_env=self._base_env, python=sys.executable,
                                  sshd_standin=STANDIN_SCRIPT, allocate_port=functools.partial(free_port, planning.LOCAL_ADDRESS))
        svc_dir = Path(layout.svc_dir)
        svc_dir.mkdir(parents=True, exist_ok=True)
        for filename, content in {**planning.svc_files(self._job), "nodes": planning.nodes_file(), **planning.tf_addresses(plans)}.items():
            write_whole(svc_dir / filename, content)  # a full disk leaves no half-written hosts file
        now = self._clock()
        with self._cond:
            self.pods = {}
            for p in plans:
                template = self._template(p.task)
                labels = {**(template.get("metadata") or {}).get("labels", {}),
                          VOLCANO_JOB_NAME_LABEL: self.name, VOLCANO_TASK_LABEL: p.task,
                          "volcano.sh/job-namespace": self.namespace}
                annotations = {**(template.get("metadata") or {}).get("annotations", {}),
                               VOLCANO_TASK_LABEL: p.task, VOLCANO_JOB_NAME_LABEL: self.name}
                record = PodRecord(plan=p, uid=uids[p.pod], attempt=attempt, created_at=now,
                                   log_path=self.paths.pod_logs / f"attempt-{attempt}" / f"{p.pod}.log",
                                   labels=labels, annotations=annotations)
                self.pods[p.pod] = record
                self.history.append(record)
        return plans

    def _preflight(self, plans: list[planning.ReplicaPlan], attempt: int) -> tuple[str, str] | None:
        """Gang start, all or nothing: before any pod starts, check each one could (its
        program exists, its code can be fetched, its entry point is there). Returns the
        first pod that cannot start and why."""
        fetched: dict[tuple[str, str | None], str] = {}
        checks_dir = self.paths.job_dir / f"attempt-{attempt}" / "gang-check"
        try:
            for p in plans:
                if self._cancel.is_set():
                    return None
                program = p.argv[0] if p.argv else ""
                found = shutil.which(program, path=p.env.get("PATH", "")) if "/" not in program else (
                    program if os.access(program, os.X_OK) else None)
                if not found:
                    return p.pod, f"executable {program!r} not found (PATH={p.env.get('PATH', '')})"
                if p.standin:
                    continue
                if p.code_url:
                    key = (p.code_url, p.code_sha256)
                    if key not in fetched:
                        target = checks_dir / str(len(fetched))
                        error = self._fetch(p, target)
                        if error is not None:
                            return p.pod, error
                        fetched[key] = str(target)
                    root, source = fetched[key], p.code_url
                elif p.code_path:
                    root, source = p.code_path, p.code_path
                else:
                    root, source = p.cwd, "the working directory"
                if p.entry is not None and not os.path.exists(os.path.join(root, p.entry)):
                    return p.pod, f"entry point {p.entry!r} not found in {source}"
            return None
        finally:
            shutil.rmtree(checks_dir, ignore_errors=True)

    def _fetch(self, p: planning.ReplicaPlan, target: Path) -> str | None:
        python = shutil.which("python3", path=p.env.get("PATH", "")) or sys.executable
        env = {k: v for k, v in p.env.items() if k in ("PATH", "HOME", "LANG", "VPIPE_CODE_URL", "VPIPE_CODE_SHA256")}
        env["VPIPE_CODE_DIR"] = str(target)
        target.mkdir(parents=True, exist_ok=True)
        # Under a shim like the pods: a download must not outlive a killed backend either.
        self._preflight_proc, control = supervised_popen([python, "-c", FETCH_PY], env=env, stdin=subprocess.DEVNULL,
                                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = self._preflight_proc.communicate()
        finally:
            os.close(control)
            returncode = self._preflight_proc.returncode
            self._preflight_proc = None
        if returncode != 0 and not self._cancel.is_set():
            lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
            return lines[-1] if lines else f"fetching the code exited with {returncode}"
        return None

    def _start(self, plans: list[planning.ReplicaPlan], attempt: int) -> tuple[str, str] | None:
        started: list[PodRecord] = []
        for p in plans:
            record = self.pods[p.pod]
            process = PodProcess(p, record.uid, record.log_path, self._write_line,
                                 functools.partial(self._exited, attempt=attempt), clock=self._clock)
            with self._cond:
                record.process = process  # before it starts: a quick exit must find its record
            try:
                process.start()
            except OSError as err:
                with self._cond:
                    record.process = None
                self._stop(started, "StartError")
                return p.pod, f"cannot start {p.argv[0]!r}: {err.strerror or err}"
            with self._cond:
                record.started_at = process.started_at
                if record.phase == "Pending":  # not already finished
                    record.phase = "Running"
            started.append(record)
        # No status update of its own: the caller's transition to Running publishes the pods'
        # counts with the phase, in one update as Volcano's controller does (never "Pending |
        # every pod running").
        return None

    def _start_failed(self, pod: str, why: str, *, attempt: int) -> None:
        now = self._clock()
        with self._cond:
            record = self.pods[pod]
            record.phase, record.reason, record.message = "Failed", "StartError", why
            record.exit_code, record.finished_at = START_ERROR_EXIT_CODE, now
            for other in self.pods.values():
                if other is not record and other.phase == "Pending":
                    other.stopped_by = "StartError"
            self.failed.append(self._pod_dict(record))
        self._transition("Failed", "StartError",
                         f"gang start failed, no pod was started: pod {pod} cannot start: {why}")

    def _exited(self, process: PodProcess, attempt: int) -> None:
        """From a pod's waiter thread: record the exit, then let the job's thread decide."""
        with self._cond:
            record = self.pods.get(process.plan.pod)
            if record is None or record.process is not process:
                return
            record.started_at = process.started_at
            record.finished_at = process.finished_at
            record.exit_code = process.returncode
            if record.stopped_by is None or record.phase in ("Pending", "Running"):
                # A deleted pod ends in a terminal phase too (as the kubelet reports it): only
                # one that ended on its own is a failure the job acts on.
                record.phase = "Succeeded" if process.returncode == 0 else "Failed"
                record.reason = "Completed" if process.returncode == 0 else "Error"
                if record.phase == "Failed" and record.stopped_by is None:
                    self.failed.append(self._pod_dict(record))
        self._events.put(("exit", process.plan.pod, attempt))
        self._changed()

    def _supervise(self, attempt: int) -> str:
        while True:
            event = self._events.get()
            if event[0] == "restart":
                return self._restart_job(event[1], f"job restarted by a RestartJob command ({event[1]})")
            if event[0] != "exit":
                self._apply_command(event)
                return "final"
            record = self.pods.get(event[1])
            if event[2] != attempt or record is None or record.stopped_by is not None:
                continue
            action, cause = self._policy_action(record)
            if action is None:
                if self._all_finished():
                    self._finish_all_done()
                    return "final"
                continue
            if action == "CompleteJob":
                self._complete(record, cause)
            elif action == "TerminateJob":
                self._end("Terminating", "Terminated", "TerminateJob", cause, self._describe(record, cause, action))
            elif action == "AbortJob":
                self._end("Aborting", "Aborted", "AbortJob", cause, self._describe(record, cause, action))
            elif action == "RestartJob":
                return self._restart(record, cause)
            return "final"

    def _policy_action(self, record: PodRecord) -> tuple[str | None, str]:
        """Volcano's order: the pod's task policies, then the job's; an event matches by name,
        a failure also by exit code."""
        if record.phase == "Failed":
            event = "PodFailed"
        elif record.phase == "Succeeded" and self._task_completed(record.plan.task):
            event = "TaskCompleted"
        else:
            return None, ""
        task = next(t for t in self._job["spec"]["tasks"] if t["name"] == record.plan.task)
        for policy in [*(task.get("policies") or []), *(self._job["spec"].get("policies") or [])]:
            events = [policy["event"]] if policy.get("event") else list(policy.get("events") or [])
            if events and (event in events or "*" in events):
                return policy["action"], event
            code = policy.get("exitCode")
            if event == "PodFailed" and code is not None and int(code) == record.exit_code:
                return policy["action"], f"exit code {code}"
        return None, event

    def _task_completed(self, task: str) -> bool:
        with self._cond:
            mine = [r for r in self.pods.values() if r.plan.task == task]
            return bool(mine) and all(r.phase == "Succeeded" for r in mine)

    def _all_finished(self) -> bool:
        with self._cond:
            return all(r.phase in ("Succeeded", "Failed") for r in self.pods.values())

    def _finish_all_done(self) -> None:
        """Volcano's running state with no policy left to fire: every pod finished."""
        with self._cond:
            succeeded = sum(1 for r in self.pods.values() if r.phase == "Succeeded")
            per_task_ok = all(
                sum(1 for r in self.pods.values() if r.plan.task == t["name"] and r.phase == "Succeeded")
                >= int(t.get("minAvailable", t.get("replicas", 1)))
                for t in self._job["spec"]["tasks"]
            )
        if per_task_ok and succeeded >= int(self._job["spec"].get("minAvailable") or 0):
            self._transition("Completed", "AllPodsFinished", f"every pod finished, {succeeded} succeeded")
        else:
            self._transition("Failed", "AllPodsFinished", f"every pod finished, too few succeeded ({succeeded})")

    def _describe(self, record: PodRecord, cause: str, action: str) -> str:
        what = f"pod {record.plan.pod} exited with code {record.exit_code}"
        return f"{what} ({cause} -> {action})"

    def _complete(self, record: PodRecord, cause: str) -> None:
        message = f"task {record.plan.task} completed ({cause} -> CompleteJob)"
        with self._cond:
            # The task completed when its last pod finished (exits may be handled out of order).
            ends = [r.finished_at for r in self.pods.values() if r.plan.task == record.plan.task and r.finished_at]
            completed_at = max(ends) if ends else self._clock()
            servers = [r for r in self.pods.values() if r.plan.task == PARAMETER_SERVER_TASK]
            still_running = [r for r in servers if r.phase == "Running"]
        self._transition("Completing", "CompleteJob", message)
        self._stop(list(self.pods.values()), "CompleteJob")
        if servers:
            # Parameter servers still running when the task completed were stopped by the
            # policy; without it they would have run on. How long they outlived the task:
            ends = [r.process.finished_at for r in still_running if r.process and r.process.finished_at is not None]
            with self._cond:
                self.linger = max(0.0, max(ends) - completed_at) if ends else 0.0
        self._transition("Completed", "CompleteJob", message)

    def _restart(self, record: PodRecord, cause: str) -> str:
        return self._restart_job(cause, self._describe(record, cause, "RestartJob"))

    def _restart_job(self, cause: str, description: str) -> str:
        with self._cond:
            self._job["status"]["retryCount"] = int(self._job["status"]["retryCount"]) + 1
            retries = int(self._job["status"]["retryCount"])
        max_retry = int(self._job["spec"].get("maxRetry") or 3)
        self._transition("Restarting", cause, description)
        # A restart deletes every pod, finished ones too (Volcano's PodRetainPhaseNone).
        self._stop(list(self.pods.values()), "RestartJob", keep_finished=False)
        if retries >= max_retry:
            # As Volcano: the failure that reaches maxRetry is counted in retryCount but restarts nothing.
            self._transition("Failed", "MaxRetryReached",
                             f"{description}; restarted {restarts_made(retries, max_retry)} time(s), maxRetry {max_retry} reached")
            return "final"
        self._transition("Pending", "Restarting", f"restart {retries} of at most {restarts_made(max_retry, max_retry)}")
        return "restart"

    def _end(self, transient: str, final: str, action: str, reason: str, message: str) -> None:
        self._transition(transient, reason, message)
        self._stop(list(self.pods.values()), action)
        self._transition(final, reason, message)

    def _stop(self, records: list[PodRecord], action: str, keep_finished: bool = True) -> None:
        """Delete pods: running ones are stopped; finished ones stay listed unless
        `keep_finished` is False (Volcano's PodRetainPhaseSoft / None)."""
        with self._cond:
            for r in records:
                if r.phase in ("Pending", "Running") or not keep_finished:
                    r.stopped_by = r.stopped_by or action
                    r.stopped_at = r.stopped_at or self._clock()
        self._changed()
        stop_pods([r.process for r in records if r.process is not None], self._grace_seconds, self._hurry,
                  first=reporting_pod(self._job))
        self._changed()

    # --- status

    def _template(self, task: str) -> dict[str, Any]:
        template: dict[str, Any] = next(t for t in self._job["spec"]["tasks"] if t["name"] == task)["template"]
        return template

    def _transition(self, phase: str, reason: str | None = None, message: str | None = None) -> None:
        now = rfc3339(self._clock())
        with self._cond:
            state = {"phase": phase, "lastTransitionTime": now}
            if reason:
                state["reason"] = reason
            if message:
                state["message"] = message
            self._job["status"]["state"] = state
            self._job["status"]["conditions"].append({"status": phase, "lastTransitionTime": now})
        self._changed()
        self._write_line(f"vpipe-local | job {self.namespace}/{self.name}: {phase}" + (f": {message}" if message else ""))

    def _changed(self) -> None:
        with self._cond:
            status = self._job["status"]
            counts: dict[str, dict[str, int]] = {}
            totals = {"Pending": 0, "Running": 0, "Succeeded": 0, "Failed": 0}
            terminating = 0
            for r in self.pods.values():
                if r.stopped_by is not None:
                    terminating += 1 if r.process is not None and not r.process.exited.is_set() else 0
                    continue
                phases = counts.setdefault(r.plan.task, {})
                phases[r.phase] = phases.get(r.phase, 0) + 1
                totals[r.phase] += 1
            status["taskStatusCount"] = {task: {"phase": phases} for task, phases in counts.items()}
            status.update({"pending": totals["Pending"], "running": totals["Running"], "succeeded": totals["Succeeded"],
                           "failed": totals["Failed"], "terminating": terminating})
            self.version += 1
            status["version"] = self.version
            self._job["metadata"]["resourceVersion"] = str(self.version)
            self._cond.notify_all()
        self._persist()

    def _persist(self) -> None:
        """job.json next to the job's files: what `get` would return, for people and tools."""
        path = self.paths.job_dir / "job.json"
        try:
            with self._persist_lock:
                # Owner only: the job's env may hold credentials (a code URL's user-info).
                write_whole(path, json.dumps(self.snapshot(), indent=2, sort_keys=True), 0o600)
        except OSError as err:  # a record for people; the job goes on without it
            log.debug("cannot write %s: %s", path, err)
