"""One pod as a process group on this machine: start it, stream its output (prefixed, and to
a log file), notice its exit, stop it like the kubelet stops a container (SIGTERM to the main
process, SIGKILL to everything left after the grace period), and leave nothing behind.

A container's processes all die with it. Here a pod's processes are found two ways: its
process group (every process started with start_new_session), and the POD_UID_ENV variable
every descendant inherits (mpiexec's ranks and daemonizing servers leave the group, not
their environment)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from volcano_pipelines.local.plan import POD_UID_ENV, ReplicaPlan

PROC = Path("/proc")


def marked_processes(pod_uid: str) -> list[int]:
    """Processes whose environment says they belong to the pod (Linux /proc; elsewhere
    only the process group is known)."""
    if not PROC.is_dir():
        return []
    marker = f"{POD_UID_ENV}={pod_uid}".encode() + b"\0"
    me = os.getpid()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, a zombie, or not ours to read
            continue
        if (b"\0" + environ).find(b"\0" + marker) != -1:
            found.append(int(entry.name))
    return found


def _signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


class PodProcess:
    """A started replica. `on_exit(self)` is called once, from a thread of its own, after the
    main process exited, its leftovers were killed and its output was read to the end."""

    def __init__(
        self,
        plan: ReplicaPlan,
        pod_uid: str,
        log_path: Path,
        write_line: Callable[[str], None],
        on_exit: Callable[[PodProcess], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plan = plan
        self.pod_uid = pod_uid
        self.log_path = log_path
        self._write_line = write_line
        self._on_exit = on_exit
        self._clock = clock
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.returncode: int | None = None
        self.exited = threading.Event()
        self._log: BinaryIO | None = None
        self._pump: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        """Raises OSError when the process cannot be started (no such executable, ...)."""
        for directory in self.plan.dirs:
            os.makedirs(directory, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - the output thread owns and closes it
        try:
            self.proc = subprocess.Popen(
                list(self.plan.argv),
                env=self.plan.env,
                cwd=self.plan.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, away from our terminal's signals
                close_fds=True,
            )
        except OSError:
            self._log.close()
            raise
        self.started_at = self._clock()
        self._pump = threading.Thread(target=self._read_output, name=f"out-{self.plan.pod}", daemon=True)
        self._pump.start()
        threading.Thread(target=self._wait, name=f"wait-{self.plan.pod}", daemon=True).start()

    def _read_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None and self._log is not None
        prefix = f"{self.plan.task}-{self.plan.index} | "
        for raw in iter(self.proc.stdout.readline, b""):
            self._log.write(raw)
            self._log.flush()
            self._write_line(prefix + raw.decode("utf-8", "replace").rstrip("\r\n"))
        self.proc.stdout.close()
        self._log.close()

    def _wait(self) -> None:
        assert self.proc is not None
        returncode = self.proc.wait()
        self.finished_at = self._clock()
        # The container is gone: so is everything that ran in it.
        self.kill_leftovers()
        if self._pump is not None:
            self._pump.join(timeout=10)
        # Kubernetes reports death by signal N as exit code 128 + N.
        self.returncode = 128 - returncode if returncode < 0 else returncode
        self.exited.set()
        self._on_exit(self)

    def kill_leftovers(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        # Repeat while something is found: a process may fork while it is being killed.
        for _ in range(50):
            pids = marked_processes(self.pod_uid)
            if not pids:
                return
            _signal_pids(pids, signal.SIGKILL)
            time.sleep(0.02)

    def terminate(self) -> None:
        """What the kubelet does first: SIGTERM to the container's main process."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """After the grace period: SIGKILL to everything of the pod."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _signal_pids(marked_processes(self.pod_uid), signal.SIGKILL)


def stop_pods(pods: list[PodProcess], grace_seconds: float) -> None:
    """Stop every pod at once, as Volcano deletes a job's pods together; returns when all of
    them and everything they started are gone."""
    running = [p for p in pods if p.proc is not None and not p.exited.is_set()]
    for pod in running:
        pod.terminate()
    deadline = time.monotonic() + grace_seconds
    for pod in running:
        pod.exited.wait(max(0.0, deadline - time.monotonic()))
    for pod in running:
        if not pod.exited.is_set():
            pod.kill()
    for pod in running:
        # SIGKILL cannot be ignored; the wait covers reading the rest of the output.
        pod.exited.wait(30)
    for pod in pods:
        pod.kill_leftovers()
