"""Ports for the servers the local backend's tasks start (TF gRPC servers, the sshd stand-in,
TensorBoard): free now, and not one the kernel hands out to outgoing connections meanwhile.

A port from bind(("127.0.0.1", 0)) is free when asked for, but it comes from the kernel's
ephemeral range, the same range every outgoing connection on the machine takes its source port
from; a task binds its port seconds later (after importing TensorFlow), and a connection made in
between (another task of the same job dialling its parameter server, a test's API client) can
hold that very port: the task then fails to bind and the job restarts. Ports just below the
ephemeral range are never given to outgoing connections, so a port picked there and found free
stays free unless another program binds it on purpose."""

from __future__ import annotations

import random
import socket
from collections.abc import Callable, Collection
from pathlib import Path

LOCAL_ADDRESS = "127.0.0.1"
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# The lowest port handed out here: above the well-known and most registered service ports.
LOWEST_PORT = 10000
# Fewer ports than this below the ephemeral range: fall back to asking the kernel for one.
FEWEST_CANDIDATES = 1000
ATTEMPTS = 64


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


def free_port(address: str = LOCAL_ADDRESS, *, exclude: Collection[int] = (), path: Path | None = None,
              choose: random.Random | None = None) -> int:
    """A port nothing is bound to and not in `exclude`: below the ephemeral range where that
    range leaves room (at random, so that two local jobs started together rarely pick the same
    one), otherwise the kernel's own choice."""
    span = ephemeral_range(path)
    below = span is not None and span[0] - LOWEST_PORT >= FEWEST_CANDIDATES
    pick = choose or random.SystemRandom()
    for _ in range(ATTEMPTS):
        port = pick.randrange(LOWEST_PORT, span[0]) if span is not None and below else _kernel_port(address)
        if port not in exclude and _bindable(port, address):
            return port
    raise OSError(f"no free port on {address} after {ATTEMPTS} tries")


def port_allocator(address: str = LOCAL_ADDRESS) -> Callable[[], int]:
    """One job attempt's ports: each free when given, none given twice (none is bound until
    its task starts, so `free_port` alone could repeat one)."""
    given: set[int] = set()

    def allocate() -> int:
        port = free_port(address, exclude=given)
        given.add(port)
        return port

    return allocate
