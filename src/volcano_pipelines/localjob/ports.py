"""Ports for the servers the local backend's tasks start (TF gRPC servers, the sshd stand-in,
TensorBoard): free now, and still free when the task binds them seconds later.

Two ways a port found free is lost before its server binds it (after importing TensorFlow):
- A port from bind(("127.0.0.1", 0)) comes from the kernel's ephemeral range, the range every
  outgoing connection on the machine takes its source port from; a connection made meanwhile
  (another task of the same job dialling its parameter server, a test's API client) can hold
  that very port. Ports just below the ephemeral range are never given to outgoing
  connections, so ports are picked there.
- Another process picking ports at the same time (two local jobs, control planes started side
  by side by the tests) can pick the same one. Each port handed out is reserved for a few
  minutes by a file of its number in a directory shared by this user's processes (checked and
  made under a lock of that directory), and is not handed out again until then.
And one way a port is lost later: a daemon that listens on a fixed number in that span starts
after the port was handed out (CI saw glusterd refuse to start, `Address already in use` on
24007, while a test control plane's server held it). The fixed ports of the daemons that run
on a training or test machine are never handed out."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
import time
from pathlib import Path

LOCAL_ADDRESS = "127.0.0.1"
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# The lowest port handed out here: above the well-known and most registered service ports.
LOWEST_PORT = 10000
# Fewer ports than this below the ephemeral range: fall back to asking the kernel for one.
FEWEST_CANDIDATES = 1000
ATTEMPTS = 200
# Fixed ports of daemons that run beside local jobs and test servers (Kubernetes node and
# control-plane components, GlusterFS's management daemon, Istio's sidecar): never handed out.
SERVICE_PORTS = frozenset({
    10248, 10249, 10250, 10255, 10256, 10257, 10259,  # kubelet, kube-proxy, controller manager, scheduler
    24007, 24008,  # glusterd (TCP management, RDMA)
    15000, 15001, 15004, 15006, 15008, 15009, 15020, 15021, 15090,  # Istio's sidecar
})
# How long a port handed out stays reserved: its server binds it well within this.
RESERVED_SECONDS = 600.0


def reservations_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"vpipe-ports-{os.getuid()}"


def ephemeral_range(path: Path | None = None) -> tuple[int, int] | None:
    """The kernel's range for outgoing connections' source ports; None where it cannot be read."""
    try:
        low, high = (int(part) for part in (path or EPHEMERAL_RANGE_FILE).read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def _bindable(port: int, address: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def _kernel_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def reserve(port: int, directory: Path) -> bool:
    """Claims `port` for RESERVED_SECONDS; False while another claim on it is that fresh. The
    check and the claim happen under one lock of the directory (flock: across processes and
    threads), so two callers never both claim a port."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / str(port)
    with open(directory / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        with contextlib.suppress(FileNotFoundError):
            if time.time() - path.stat().st_mtime < RESERVED_SECONDS:
                return False
        path.write_bytes(b"")
    return True


def free_port(address: str = LOCAL_ADDRESS, *, path: Path | None = None, choose: random.Random | None = None,
              reservations: Path | None = None) -> int:
    """A port nothing is bound to, reserved against this user's other callers: below the
    ephemeral range where that range leaves room (at random), otherwise the kernel's choice."""
    span = ephemeral_range(path)
    below = span is not None and span[0] - LOWEST_PORT >= FEWEST_CANDIDATES
    pick = choose or random.SystemRandom()
    directory = reservations or reservations_dir()
    for _ in range(ATTEMPTS):
        port = pick.randrange(LOWEST_PORT, span[0]) if span is not None and below else _kernel_port(address)
        if port not in SERVICE_PORTS and _bindable(port, address) and reserve(port, directory):
            return port
    raise OSError(f"no free port on {address} after {ATTEMPTS} tries")
