"""The local backend's task ports (also the test harnesses'): below the kernel's ephemeral
range (where no outgoing connection takes them), free, reserved so that no other caller gets
the same port for a while (CI saw two control planes started side by side pick one port), the
kernel's choice where the range leaves no room."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
from pathlib import Path

import pytest

from volcano_pipelines.localjob import ports


def _range_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    return path


class Offers(random.Random):
    """A chooser that offers the given ports in turn."""

    def __init__(self, offers: list[int]) -> None:
        super().__init__()
        self.offers = iter(offers)

    def randrange(self, *_: object, **__: object) -> int:  # type: ignore[override]
        return next(self.offers)


def _free_ports(count: int) -> list[int]:
    """`count` distinct ports nothing was bound to a moment ago. The tests below offer these
    as the free ones, not fixed numbers: CI runs local jobs and control planes side by side,
    and one of them held port 20001 while this module ran (both tests offering it failed)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((ports.LOCAL_ADDRESS, 0))
        found = [int(sock.getsockname()[1]) for sock in socks]
    assert not set(found) & ports.SERVICE_PORTS
    return found


def test_ports_come_from_below_the_ephemeral_range(tmp_path: Path) -> None:
    path = _range_file(tmp_path, "32768\t60999\n")
    picked = [ports.free_port(path=path, reservations=tmp_path / "r") for _ in range(50)]
    assert all(ports.LOWEST_PORT <= p < 32768 for p in picked), picked
    assert len(set(picked)) == 50  # none given twice while reserved


def test_the_machines_own_range_is_read_and_its_ports_avoided(tmp_path: Path) -> None:
    span = ports.ephemeral_range()
    if span is None:
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range on this machine")
    port = ports.free_port(reservations=tmp_path / "r")
    assert not span[0] <= port <= span[1] or span[0] - ports.LOWEST_PORT < ports.FEWEST_CANDIDATES


def test_a_port_something_is_bound_to_is_never_given(tmp_path: Path) -> None:
    path = _range_file(tmp_path, "32768 60999")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        busy = held.getsockname()[1]
        (free,) = _free_ports(1)
        assert ports.free_port(path=path, choose=Offers([busy, busy, free]), reservations=tmp_path / "r") == free


def test_fixed_ports_of_node_daemons_are_never_given(tmp_path: Path) -> None:
    # glusterd binds 24007 when a test session starts it; a control plane that got 24007 earlier
    # made it exit 1 ("Address already in use") and every GlusterFS test of that CI run erred.
    path = _range_file(tmp_path, "32768 60999")
    (free,) = _free_ports(1)
    offers = Offers([24007, 10250, 24008, free])
    assert ports.free_port(path=path, choose=offers, reservations=tmp_path / "r") == free
    assert not (tmp_path / "r" / "24007").exists()


def test_a_port_reserved_by_another_caller_is_passed_over_until_the_reservation_is_stale(tmp_path: Path) -> None:
    path, directory = _range_file(tmp_path, "32768 60999"), tmp_path / "r"
    first, second = _free_ports(2)
    assert ports.free_port(path=path, choose=Offers([first]), reservations=directory) == first
    # Another caller offered the same port: passed over, the next free one given.
    assert ports.free_port(path=path, choose=Offers([first, second]), reservations=directory) == second
    # A reservation older than RESERVED_SECONDS is taken over.
    old = os.stat(directory / str(first)).st_mtime - ports.RESERVED_SECONDS - 1
    os.utime(directory / str(first), (old, old))
    assert ports.free_port(path=path, choose=Offers([first]), reservations=directory) == first
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == sorted([str(first), str(second)])


def _race_for(port: int, directory: Path, callers: int = 8) -> list[bool]:
    """`callers` threads released together, each trying to reserve `port`: who got it."""
    won: list[bool] = []
    barrier = threading.Barrier(callers)

    def claim() -> None:
        barrier.wait()
        won.append(ports.reserve(port, directory))

    threads = [threading.Thread(target=claim) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return won


def test_callers_racing_for_one_port_get_it_once(tmp_path: Path) -> None:
    assert sorted(_race_for(20001, tmp_path / "r")) == [False] * 7 + [True]


def test_callers_racing_for_a_stale_reservation_take_it_over_once(tmp_path: Path) -> None:
    directory = tmp_path / "r"
    assert ports.reserve(20001, directory)
    old = os.stat(directory / "20001").st_mtime - ports.RESERVED_SECONDS - 1
    os.utime(directory / "20001", (old, old))
    won = _race_for(20001, directory)
    assert won.count(True) == 1, won


@pytest.mark.parametrize("text", ["1024 65535", "10500 60999", "garbage", ""])
def test_no_room_below_the_range_or_no_range_falls_back_to_the_kernel(tmp_path: Path, text: str) -> None:
    port = ports.free_port(path=_range_file(tmp_path, text), reservations=tmp_path / "r")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))  # free, as promised


def test_no_free_port_at_all_is_an_error_not_a_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_bindable", lambda port, address: False)
    with pytest.raises(OSError, match="no free port"):
        ports.free_port(path=_range_file(tmp_path, "32768 60999"), reservations=tmp_path / "r")


def test_an_unreadable_range_file_is_none(tmp_path: Path) -> None:
    assert ports.ephemeral_range(tmp_path / "missing") is None
    assert ports.ephemeral_range(_range_file(tmp_path, "1 2 3")) is None
    assert ports.ephemeral_range(_range_file(tmp_path, "32768 60999")) == (32768, 60999)
