"""The train component's verdict: every way a Volcano job can end badly (Failed, Aborted,
Terminated) fails the KFP task; Completed passes. The job runs on an in-memory backend in
place of the cluster's (the same protocol)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.kfp_runtime import Markdown, Metrics, _outputs
from tests.unit.steps.memory_backend import FakeClock, MemoryBackend, job
from volcano_pipelines.kfp.runtime import run_step
from volcano_pipelines.steps import _train as train_step

ARGS = {"name": "j", "namespace": "ns", "code_url": "http://files/code/", "run_id": "r1"}


def _backend(monkeypatch: pytest.MonkeyPatch, final: str) -> MemoryBackend:
    backend = MemoryBackend([job("Running"), job(final, message=f"the job ended {final}")], FakeClock())
    monkeypatch.setattr(train_step, "_cluster_backend", lambda *_: backend)
    return backend


@pytest.mark.parametrize("final", ["Failed", "Aborted", "Terminated"])
def test_a_job_that_ended_badly_fails_the_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], final: str) -> None:
    backend = _backend(monkeypatch, final)
    summary = Markdown(tmp_path / "summary.md")
    with pytest.raises(SystemExit) as stopped:
        run_step("train_tf", dict(ARGS), metrics=Metrics(), summary=summary)
    assert stopped.value.code == 1
    assert f"job ns/j {final}" in capsys.readouterr().err
    assert not {"abort", "delete"} & set(backend.calls)  # it ran to its end: nothing to stop
    assert final in Path(summary.path).read_text()


def test_a_completed_job_passes_and_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _backend(monkeypatch, "Completed")
    values = run_step("train_tf", dict(ARGS), metrics=Metrics(), summary=Markdown(tmp_path / "summary.md"))
    out = _outputs("train_tf", values)
    assert (out["phase"], out["succeeded"], out["job_name"], out["job_namespace"]) == ("Completed", True, "j", "ns")


def test_wait_false_returns_after_submission_whatever_the_phase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(monkeypatch, "Failed")
    values = run_step("train_tf", {**ARGS, "wait": False}, metrics=Metrics(), summary=Markdown(tmp_path / "s.md"))
    out = _outputs("train_tf", values)
    assert out["phase"] == "Pending" and backend.calls == ["submit"]
