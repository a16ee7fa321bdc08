"""The local backend's task ports: below the kernel's ephemeral range (where no outgoing
connection takes them), free, never one port twice in a job, the kernel's choice where the
range leaves no room."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from volcano_pipelines.local import ports


def _range_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ip_local_port_range"
    path.write_text(text)
    return path


def test_ports_come_from_below_the_ephemeral_range(tmp_path: Path) -> None:
    path = _range_file(tmp_path, "32768\t60999\n")
    picked = {ports.free_port(path=path) for _ in range(50)}
    assert all(ports.LOWEST_PORT <= p < 32768 for p in picked), picked
    assert len(picked) > 1  # chosen at random, so two jobs started together rarely collide


def test_the_machines_own_range_is_read_and_its_ports_avoided() -> None:
    span = ports.ephemeral_range()
    if span is None:
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range on this machine")
    port = ports.free_port()
    assert not span[0] <= port <= span[1] or span[0] - ports.LOWEST_PORT < ports.FEWEST_CANDIDATES


def test_a_port_something_is_bound_to_is_never_given(tmp_path: Path) -> None:
    path = _range_file(tmp_path, "32768 60999")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        busy = held.getsockname()[1]
        # A chooser that offers the busy port first: it is passed over for the next.
        offers = iter([busy, busy, 20001])

        class Offer(random.Random):
            def randrange(self, *_: object, **__: object) -> int:  # type: ignore[override]
                return next(offers)

        assert ports.free_port(path=path, choose=Offer()) == 20001


def test_one_job_never_gets_the_same_port_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A chooser that repeats itself: the allocator must still hand out distinct ports.
    repeated = iter([20001, 20001, 20001, 20002, 20001, 20002, 20003])

    def offer(*_: object) -> int:
        return next(repeated)

    monkeypatch.setattr(ports, "_bindable", lambda port, address: True)
    monkeypatch.setattr(random.SystemRandom, "randrange", lambda self, *a: offer())
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_FILE", _range_file(tmp_path, "32768 60999"))
    allocate = ports.port_allocator()
    assert [allocate(), allocate(), allocate()] == [20001, 20002, 20003]


@pytest.mark.parametrize("text", ["1024 65535", "10500 60999", "garbage", ""])
def test_no_room_below_the_range_or_no_range_falls_back_to_the_kernel(tmp_path: Path, text: str) -> None:
    port = ports.free_port(path=_range_file(tmp_path, text))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))  # free, as promised


def test_no_free_port_at_all_is_an_error_not_a_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_bindable", lambda port, address: False)
    with pytest.raises(OSError, match="no free port"):
        ports.free_port(path=_range_file(tmp_path, "32768 60999"))


def test_an_unreadable_range_file_is_none(tmp_path: Path) -> None:
    assert ports.ephemeral_range(tmp_path / "missing") is None
    assert ports.ephemeral_range(_range_file(tmp_path, "1 2 3")) is None
    assert ports.ephemeral_range(_range_file(tmp_path, "32768 60999")) == (32768, 60999)
