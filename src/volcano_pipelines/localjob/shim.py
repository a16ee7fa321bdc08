"""A pod's init process when the job runs on this machine (run as a script by the local
backend, standard library only): what a container runtime's shim and the container's PID
namespace give a pod on a cluster, here for one process tree.

    python3 shim.py CONTROL_FD ARGV_FD -- LABEL...

It reads PROGRAM ARG... (the container's command) from ARGV_FD, a pipe, as a JSON list, starts
it as its only child and stays its parent. The command is not among the shim's own arguments:
those are what `ps` shows for the pod for as long as it runs, and a pod's command is often a
long inline script (`bash -c <the 150-line entry script> vpipe-entry ARGS`); LABEL is what the
backend shows there instead (processes.command_label), for people only.


- every process of the pod stays below it, however deep and whatever it does: it is a child
  subreaper (PR_SET_CHILD_SUBREAPER), so a process whose parent dies is re-parented to the
  shim, not to init. A daemon that double-forks, leaves the process group (setsid) and clears
  its environment is still found, as a descendant;
- SIGTERM is passed on to PROGRAM (the kubelet's graceful stop goes to the container's main
  process);
- CONTROL_FD is the read end of a pipe whose write end only the backend holds. A byte on it
  means "kill the pod now" (the grace period is over); end of file means the backend is gone,
  however it died (SIGKILL, SIGHUP, a crash: the kernel closes its files), and the pod dies
  with it, as a container dies with its sandbox;
- when PROGRAM exits, everything else of the pod is killed (the container is gone), and the
  shim exits with PROGRAM's status (death by signal N as 128 + N, as Kubernetes reports it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

PR_SET_CHILD_SUBREAPER = 36
KILL_TREE_SECONDS = 30.0


def become_subreaper() -> bool:
    """Orphans of the pod are re-parented to us (Linux >= 3.4); False where unavailable."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Every living process below `root`, from /proc (zombies are left to the reaping)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] == b"Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_descendants() -> list[int]:
    """SIGKILL to every descendant; returns the ones signalled."""
    pids = descendants(os.getpid())
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return pids


def reap() -> list[tuple[int, int]]:
    """Collect every child that has exited (orphans re-parented to us included)."""
    done: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done
        if pid == 0:
            return done
        done.append((pid, status))


def exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[2] != "--":
        print("usage: shim.py CONTROL_FD ARGV_FD -- LABEL...", file=sys.stderr)
        return 2
    control = int(argv[0])
    with os.fdopen(int(argv[1]), "rb") as given:  # the whole command, then end of file
        program = [str(word) for word in json.loads(given.read())]
    os.set_inheritable(control, False)  # the pod's processes must not hold it open
    become_subreaper()
    main_pid: int | None = None

    def forward(signum: int, _frame: object) -> None:
        if main_pid is not None:
            try:
                os.kill(main_pid, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    try:
        # SIGPIPE and SIGXFSZ back to their defaults: Python ignores them, and an ignored
        # signal stays ignored across exec (subprocess restores them the same way).
        main_pid = os.posix_spawnp(program[0], program, os.environ,
                                   setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
    except OSError as err:
        print(f"vpipe-local: cannot start {program[0]!r}: {err.strerror or err}", file=sys.stderr, flush=True)
        return 127

    def watch_control() -> None:
        # A byte (kill now) or end of file (the backend is gone): the pod dies. Signals only:
        # the main thread alone reaps, so it sees the main process's status.
        try:
            os.read(control, 1)
        except OSError:
            pass
        while True:
            kill_descendants()
            time.sleep(0.05)

    threading.Thread(target=watch_control, daemon=True).start()
    status: int | None = None
    while status is None:
        try:
            pid, got = os.waitpid(-1, 0)
        except ChildProcessError:  # cannot happen while the main process is ours; be safe
            return 1
        if pid == main_pid:
            status = got
    # The container is gone: so is everything that ran in it. Repeat while something is
    # found: a process may fork while it is being killed. Bounded: a process stuck in the
    # kernel (a hung FUSE mount) cannot die, and must not hold up the pod's end for ever.
    give_up = time.monotonic() + KILL_TREE_SECONDS
    while True:
        signalled = kill_descendants()
        reaped = reap()
        if not signalled and not reaped:
            break
        if time.monotonic() > give_up:
            print(f"vpipe-local: processes {signalled} did not die in {KILL_TREE_SECONDS:g}s", file=sys.stderr, flush=True)
            break
        time.sleep(0.01)
    return exit_code(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
