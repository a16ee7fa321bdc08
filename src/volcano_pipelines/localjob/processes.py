"""One pod as a process tree on this machine: start it, stream its output (prefixed, and to a
log file), notice its exit, stop it like the kubelet stops a container (SIGTERM to the main
process, SIGKILL to everything left after the grace period), and leave nothing behind, even
when the backend itself is killed.

Each pod runs under its own init process, `shim.py` (see there): a child subreaper that keeps
every process the pod starts below it, passes SIGTERM on, kills the whole tree when the main
process exits, when told to, and when the backend dies (the end of a pipe only the backend
holds). Two more nets catch what an init that was itself killed could leave: the pod's process
group (start_new_session) and the POD_UID_ENV variable every descendant inherits."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from volcano_pipelines.localjob.plan import POD_UID_ENV, ReplicaPlan
from volcano_pipelines.volcano.entrypoint import ENTRY_COMMAND, SCRIPT_NAME

PROC = Path("/proc")
SHIM = str(Path(__file__).with_name("shim.py"))
# Longer output lines are passed on in pieces of this size: a program that writes without a
# newline must not make the backend buffer all of it (the log file gets the bytes unchanged).
MAX_LINE_BYTES = 64 * 1024
# How long the shim gets to kill its tree when told to, before the process group and the
# marked processes are killed from here.
SHIM_KILL_WAIT_SECONDS = 5.0


def command_label(argv: list[str]) -> list[str]:
    """What `ps` shows for a pod's shim: its command, with an inline script of several lines
    (`bash -c SCRIPT vpipe-entry ARGS`, `python3 -c CODE`) named by its size instead of printed
    (`vpipe-entry (151-line bash script) --job_name worker ...`); our entry command by its name
    (`vpipe-entry --job_name worker ...`)."""
    if tuple(argv[:4]) == ENTRY_COMMAND:  # our entry script, which runs from the environment
        return [SCRIPT_NAME, *argv[4:]]
    if len(argv) >= 3 and argv[1] == "-c" and "\n" in argv[2]:
        program, lines = Path(argv[0]).name, len(argv[2].splitlines())
        name = argv[3] if len(argv) > 3 else program
        return [name, f"({lines}-line {program} script)", *argv[4:]]
    return list(argv)


def supervised_popen(argv: list[str], **kwargs: Any) -> tuple[subprocess.Popen[bytes], int]:
    """Popen of `argv` under a shim in a session of its own; returns the process (the shim,
    whose exit status is the program's) and the write end of its control pipe: write a byte
    to kill the tree now, close it to let the tree die. Raises OSError like Popen. The shim
    reads `argv` from a pipe; its own arguments show command_label(argv)."""
    read_end, write_end = os.pipe()
    argv_read, argv_write = os.pipe()
    try:
        proc = subprocess.Popen(  # argv is the pod's command, never a shell string
            [sys.executable, "-I", "-S", SHIM, str(read_end), str(argv_read), "--", *command_label(argv)],
            pass_fds=(read_end, argv_read),
            start_new_session=True,  # its own process group, away from our terminal's signals
            close_fds=True,
            **kwargs,
        )
    except BaseException:
        os.close(write_end)
        os.close(argv_write)
        raise
    finally:
        os.close(read_end)
        os.close(argv_read)
    try:
        with os.fdopen(argv_write, "wb") as pipe:  # read at the shim's start; a larger command waits for that
            pipe.write(json.dumps(argv).encode())
    except BrokenPipeError:
        pass  # the shim ended before reading it: its exit status says so
    return proc, write_end


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
        self._control: int | None = None  # write end of the shim's control pipe
        self._control_lock = threading.Lock()

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
            self.proc, self._control = supervised_popen(
                list(self.plan.argv),
                env=self.plan.env,
                cwd=self.plan.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
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
        log_file: Any = self._log
        for raw in iter(lambda: self.proc.stdout.readline(MAX_LINE_BYTES), b""):  # type: ignore[union-attr]
            if log_file is not None:
                try:
                    log_file.write(raw)
                    log_file.flush()
                except OSError as err:
                    # A full disk: say so once, keep reading (a task blocked on a full pipe
                    # would hang) and keep passing its output on.
                    log_file = None
                    self._write_line(f"{prefix}vpipe-local: cannot write the pod log {self.log_path}: "
                                     f"{err.strerror or err}; its output continues here only")
            # What a terminal would show of the line: a progress bar's carriage returns overwrite
            # it, and the prefix stays in front (the log file has every byte).
            self._write_line(prefix + raw.decode("utf-8", "replace").rstrip("\r\n").rsplit("\r", 1)[-1])
        self.proc.stdout.close()
        try:
            self._log.close()
        except OSError:
            pass  # the unwritten rest was reported above

    def _wait(self) -> None:
        assert self.proc is not None
        returncode = self.proc.wait()
        self.finished_at = self._clock()
        self._close_control()
        # The container is gone: so is everything that ran in it (the shim killed its tree;
        # this catches what a killed shim could not), and so is its /tmp.
        self.kill_leftovers()
        if self.plan.tmp_dir:
            shutil.rmtree(self.plan.tmp_dir, ignore_errors=True)
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
        """After the grace period: the shim kills every process of the pod."""
        with self._control_lock:
            if self._control is not None:
                try:
                    os.write(self._control, b"k")
                except OSError:  # the shim is gone already
                    pass

    def kill_hard(self) -> None:
        """When the shim did not end: SIGKILL to its process group and the marked processes."""
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _signal_pids(marked_processes(self.pod_uid), signal.SIGKILL)

    def _close_control(self) -> None:
        with self._control_lock:
            if self._control is not None:
                os.close(self._control)
                self._control = None


def stop_pods(pods: list[PodProcess], grace_seconds: float, hurry: threading.Event | None = None,
              first: str | None = None) -> None:
    """Stop every pod, as Volcano deletes a job's pods; returns when all of them and everything
    they started are gone. `hurry`, once set, ends the grace period. `first`: the pod (the
    job's coordinator, a TF chief) stopped on its own before the others, so that it can write
    its checkpoint on SIGTERM while the parameter servers and workers it needs still run
    (stopped together, it only saw its peers vanish and printed connection errors until it was
    killed); the others get their own grace period once it is gone."""
    hurry = hurry or threading.Event()
    leader = [p for p in pods if p.plan.pod == first]
    if leader and len(leader) < len(pods):
        _stop_together(leader, grace_seconds, hurry)
        pods = [p for p in pods if p not in leader]
    _stop_together(pods, grace_seconds, hurry)


def _stop_together(pods: list[PodProcess], grace_seconds: float, hurry: threading.Event) -> None:
    running = [p for p in pods if p.proc is not None and not p.exited.is_set()]
    for pod in running:
        pod.terminate()
    deadline = time.monotonic() + grace_seconds
    while not hurry.is_set() and not all(p.exited.is_set() for p in running):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        hurry.wait(min(left, 0.1))
    for pod in running:
        if not pod.exited.is_set():
            pod.kill()
    deadline = time.monotonic() + SHIM_KILL_WAIT_SECONDS
    for pod in running:
        pod.exited.wait(max(0.0, deadline - time.monotonic()))
    for pod in running:
        if not pod.exited.is_set():
            pod.kill_hard()
    for pod in running:
        # SIGKILL cannot be ignored; the wait covers reading the rest of the output.
        pod.exited.wait(30)
    for pod in pods:
        pod.kill_leftovers()
