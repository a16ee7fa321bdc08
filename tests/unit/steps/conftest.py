"""Fixtures the step tests of several modules share: for serve(), the in-memory apps API patched
in (fake) and a model directory with versions 1 and 2 (export); for the reap loop, what the step
asks of the cluster, recorded (actions)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.clock import VirtualClock
from tests.helpers.reaping import InMemorySweep, Recorder
from tests.helpers.serving import FakeApps
from volcano_pipelines.k8s import apps
from volcano_pipelines.k8s import client as k8s_client
from volcano_pipelines.objects.rollout import Rollout
from volcano_pipelines.steps import _serve as serving


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def make(previous: dict[str, Any] | None, rollouts: list[Rollout]) -> FakeApps:
        api = FakeApps(previous, rollouts)
        monkeypatch.setattr(k8s_client, "connect", api.connect)
        for name in ("get", "apply", "patch", "wait_for_rollout", "check_all"):
            monkeypatch.setattr(apps, name, getattr(api, name))
        # TF Serving's status asked every 50 ms instead of every 2 s: the same answers, sooner;
        # and on a clock that moves only when the wait sleeps, so a model that never comes up
        # costs its ~20 real requests, not the second of real time its timeout names.
        clock = VirtualClock()
        monkeypatch.setattr(serving, "wait_model_available",
                            functools.partial(serving.wait_model_available, interval=0.05, clock=clock,
                                              sleep=clock.sleep))
        return api

    return make


@pytest.fixture
def export(tmp_path: Path) -> Path:
    """A model directory with versions 1 and 2 (2 is the new one)."""
    for version in ("1", "2"):
        (tmp_path / "export" / version / "variables").mkdir(parents=True)
        (tmp_path / "export" / version / "saved_model.pb").write_bytes(b"pb")
    return tmp_path / "export"


@pytest.fixture
def actions(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Record what the step asks of the cluster; a CompleteJob / scale / delete makes the
    parameter server pods go, as the controllers would."""
    from volcano_pipelines.k8s import apps
    from volcano_pipelines.k8s import volcano as k8s_volcano

    recorder = Recorder()
    live: dict[str, InMemorySweep] = {}

    def ps_gone(sweep: InMemorySweep) -> None:
        for key in ("vpods", "cpods"):
            for obj in list(sweep.caches.get(key, {}).values()):
                if "ps" in obj["metadata"]["name"]:
                    sweep.events.put(("DELETED", key, obj))

    def send_command(_cluster: Any, job: dict, action: str, reason: str) -> None:
        recorder.calls.append(("command", job["metadata"]["name"], action, reason))
        ps_gone(live["sweep"])

    def abort_job(_cluster: Any, job: dict, reason: str) -> str:
        recorder.calls.append(("abort", job["metadata"]["name"], reason))
        return "aborted"

    monkeypatch.setattr(k8s_volcano, "send_command", send_command)
    monkeypatch.setattr(k8s_volcano, "abort_job", abort_job)
    monkeypatch.setattr(apps, "record_event", lambda _c, obj, reason, message, **kw: recorder.calls.append(
        ("event", obj["kind"], obj["metadata"]["name"], reason)))

    def scale(_c: Any, ns: str, name: str, replicas: int) -> None:
        recorder.calls.append(("scale", name, str(replicas)))
        ps_gone(live["sweep"])

    monkeypatch.setattr(apps, "scale_deployment", scale)
    monkeypatch.setattr(apps, "delete", lambda _c, api, kind, ns, name: recorder.calls.append(("delete", kind, name)) or True)
    recorder.live = live  # type: ignore[attr-defined]
    return recorder
