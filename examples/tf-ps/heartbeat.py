"""Heartbeats for volcano-pipelines' stall detection (docs/progress.md, "Hung tasks").
Standard library only; the same file is in examples/tf-ps/ and examples/mpi/.

Every task process keeps one small file, `<log_dir>/.vpipe/progress/<job>/<task>-<index>`
(`<job>`: $VPIPE_JOB_NAME):

    step=1200 progress=1733400000.125 beat=1733400003.500 state=running

`state` is `trained` after the task's last step (what follows makes no steps), `done` once
the process ended normally. `beat` is rewritten every few seconds by a background thread (liveness: a process stopped
with SIGSTOP, or hung in the kernel, stops all its threads, so its beat stops); `step` and
`progress` when the task reports progress (`Heartbeat.progress(step)`, written with the next
beat: a task writes once per beat, however fast it steps). Each write is a temporary file
renamed over the old one, so a reader never sees half of one.

The coordinator (TF2's chief, TF1's worker 0, MPI's rank 0) also starts a scanner process
(`heartbeat.py scan ...`) that reads the directory and prints one protocol line into the
coordinator's log whenever the set of stalled tasks changes (and
every minute while it is not empty), which the train step reads with its progress reports:

    vpipe:stalled count=2 tasks=chief[0],worker[1] silent=worker[1] oldest=31 oldest_task=worker[1] time=1733400034

A task is stalled when its beat is older than the stall timeout (`silent`: the process is
not running), or when it reported progress and its last report is older than that (it runs
but makes no steps). A task that has not beaten since the scanner started (a slow start-up,
the previous attempt's file) is never flagged, nor is one whose process ended normally
(`state=done`), nor a parameter server for making no steps (it reports none).

The stall timeout comes from $VPIPE_STALL_TIMEOUT (seconds; the train step sets it from
--stall-timeout; 0 turns beats off), default 600; beats and scans every timeout / 10 seconds,
between 1 and 30."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable

DIRECTORY = os.path.join(".vpipe", "progress")
STALL_TIMEOUT_ENV = "VPIPE_STALL_TIMEOUT"
DEFAULT_STALL_TIMEOUT = 600.0
# While tasks stay stalled, the line is printed again this often, so the step's read of the
# log's last lines keeps finding it.
REPEAT_SECONDS = 60.0
# At most this many index ranges per line; the rest is counted (`more=`), never cut silently.
MAX_RANGES = 40


def stall_timeout() -> float:
    try:
        value = float(os.environ.get(STALL_TIMEOUT_ENV) or DEFAULT_STALL_TIMEOUT)
    except ValueError:
        return DEFAULT_STALL_TIMEOUT
    return value if value >= 0 else DEFAULT_STALL_TIMEOUT


def beat_interval(timeout: float) -> float:
    return min(30.0, max(1.0, timeout / 10))


class Heartbeat:
    """One task's heartbeat file, kept by a daemon thread; the coordinator also starts the scanner."""

    def __init__(self, log_dir: str, task: str, index: int, *, scan: bool = False,
                 timeout: float | None = None) -> None:
        # One directory per job: jobs may share a log volume.
        self.directory = os.path.join(log_dir, DIRECTORY, os.environ.get("VPIPE_JOB_NAME") or "job")
        self.name = f"{task}-{index}"
        self.timeout = stall_timeout() if timeout is None else timeout
        self.interval = beat_interval(self.timeout)
        self.scan = scan
        self.step: int | None = None
        self.progressed: float | None = None
        self.trained = False
        self.lock = threading.Lock()

    def start(self) -> Heartbeat:
        if self.timeout <= 0:
            return self
        os.makedirs(self.directory, exist_ok=True)
        self.write()
        atexit.register(self.write, "done")  # a task that ended normally is not stalled
        threading.Thread(target=self._run, name="vpipe-heartbeat", daemon=True).start()
        if self.scan:
            # A process of its own: a coordinator blocked inside TensorFlow may hold Python's
            # lock for as long as the task it waits for is stopped (seen: TF2's chief in
            # ClusterCoordinator.join), and no thread of its own would scan meanwhile. Same
            # process group and output; it ends when this process does.
            scanner = subprocess.Popen([sys.executable, os.path.abspath(__file__), "scan", self.directory,
                                        str(self.timeout), self.name, str(os.getpid())])
            atexit.register(scanner.terminate)
        return self

    def progress(self, step: int, last: bool = False) -> None:
        """The task made progress: it stands at `step` now (`last`: its last step; what follows,
        an export, an evaluation, makes no steps and is not a stall). Kept in memory; the next
        beat writes it, so a task writes once per beat however fast it steps."""
        with self.lock:
            self.step, self.progressed, self.trained = step, time.time(), last

    def write(self, state: str = "running") -> None:
        with self.lock:
            state = "trained" if state == "running" and self.trained else state
            step = "-" if self.step is None else str(self.step)
            progressed = "-" if self.progressed is None else f"{self.progressed:.3f}"
        text = f"step={step} progress={progressed} beat={time.time():.3f} state={state}\n"
        path = os.path.join(self.directory, self.name)
        tmp = os.path.join(self.directory, f".{self.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError:  # a full or lost volume must not stop training: the step sees the task go silent
            pass

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            self.write()


class Scanner:
    """The coordinator's scan of every task's file, every beat interval, in a process of its
    own; `parent`: the coordinator's file name and pid (it may beat late while TensorFlow holds
    Python's lock: as long as its process is not stopped, it counts as beating)."""

    def __init__(self, directory: str, timeout: float, parent: tuple[str, int] | None = None,
                 out: Callable[[str], None] | None = None) -> None:
        self.directory = directory
        self.timeout = timeout
        self.parent = parent
        self.out = out or (lambda line: print(line, file=sys.stdout, flush=True))
        self.started = time.time()
        self.last_line: tuple[str, str] | None = None
        self.last_printed = 0.0

    def run(self) -> int:
        while True:
            time.sleep(beat_interval(self.timeout))
            if self.parent is not None and os.getppid() != self.parent[1]:
                return 0  # the coordinator is gone
            running = {self.parent[0]: self.parent[1]} if self.parent is not None else {}
            try:
                self.report(scan(self.directory, time.time(), self.started, self.timeout, running))
            except OSError:
                pass

    def report(self, stalled: list[tuple[str, int, float, bool]]) -> None:
        """Print the line when the stalled set changed, and again every minute while it is not empty."""
        now = time.time()
        line = stalled_line(stalled, now)
        key = (ranges((t, i) for t, i, _, _ in stalled), ranges((t, i) for t, i, _, silent in stalled if silent))
        if key == self.last_line and (not stalled or now - self.last_printed < REPEAT_SECONDS):
            return
        if self.last_line is None and not stalled:
            self.last_line = key  # nothing to say yet
            return
        self.last_line, self.last_printed = key, now
        self.out(line)


def parse(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split() if "=" in pair)


def process_running(pid: int) -> bool | None:
    """Whether a process on this machine exists and is not stopped (None: cannot tell)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return None
    return state not in ("T", "t", "Z", "X")


def scan(directory: str, now: float, since: float, timeout: float,
         running: dict[str, int] | None = None) -> list[tuple[str, int, float, bool]]:
    """(task, index, seconds without progress or beat, silent) of every stalled task: one
    directory listing and one small read per task. `running`: file name -> pid of tasks on this
    machine whose liveness is their process's state rather than their beat."""
    stalled = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith("."):
                continue
            task, _, index = entry.name.rpartition("-")
            if not task or not index.isdigit():
                continue
            try:
                with open(entry.path, encoding="ascii") as f:
                    fields = parse(f.read(256))
                beat = float(fields["beat"])
                progressed = None if fields.get("progress", "-") == "-" else float(fields["progress"])
            except (OSError, KeyError, ValueError):
                continue
            if beat < since or fields.get("state") == "done":
                continue  # not beaten since this scanner started (another attempt, a slow start), or ended
            if entry.name in (running or {}) and process_running((running or {})[entry.name]):
                beat = now
            if now - beat > timeout:
                stalled.append((task, int(index), now - beat, True))
            elif progressed is not None and progressed >= since and now - progressed > timeout \
                    and fields.get("state") == "running":
                stalled.append((task, int(index), now - progressed, False))
    return stalled


def ranges(tasks: Iterable[tuple[str, int]]) -> str:
    """`chief[0],worker[12-15,803]`: each task's indices as ranges; past MAX_RANGES ranges,
    `+N` tasks more."""
    by_task: dict[str, list[int]] = {}
    for task, index in tasks:
        by_task.setdefault(task, []).append(index)
    parts: list[str] = []
    shown = left = 0
    for task in sorted(by_task):
        spans: list[str] = []
        indices = sorted(set(by_task[task]))
        start = prev = indices[0]
        for index in [*indices[1:], None]:
            if index is not None and index == prev + 1:
                prev = index
                continue
            count = prev - start + 1
            if shown < MAX_RANGES:
                spans.append(str(start) if start == prev else f"{start}-{prev}")
                shown += 1
            else:
                left += count
            if index is not None:
                start = prev = index
        if spans:
            parts.append(f"{task}[{','.join(spans)}]")
    text = ",".join(parts) or "none"
    return text + (f",+{left}" if left else "")


def stalled_line(stalled: list[tuple[str, int, float, bool]], now: float) -> str:
    if not stalled:
        return f"vpipe:stalled count=0 tasks=none time={int(now)}"
    oldest = max(stalled, key=lambda s: s[2])
    silent = [(t, i) for t, i, _, quiet in stalled if quiet]
    return (f"vpipe:stalled count={len(stalled)} tasks={ranges((t, i) for t, i, _, _ in stalled)}"
            f" silent={ranges(silent)} oldest={int(oldest[2])} oldest_task={oldest[0]}[{oldest[1]}]"
            f" time={int(now)}")


def main(argv: list[str]) -> int:
    """`heartbeat.py scan DIRECTORY TIMEOUT NAME PID`: the coordinator's scanner process."""
    if len(argv) != 5 or argv[0] != "scan":
        print(main.__doc__, file=sys.stderr)
        return 2
    _, directory, timeout, name, pid = argv
    return Scanner(directory, float(timeout), (name, int(pid))).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
