"""run_step's own paths with stand-in steps (found by scripts/mutation on kfp/runtime.py):
KFP's final status handed to the exit handler, the progress printer given only to steps that
take one and closed however the step ends, a failed step's partial result reported, a
non-train result with succeeded=False failing the task, and integers only coerced where the
hint says int."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.kfp_runtime import Markdown, Metrics
from volcano_pipelines import progress as progress_module
from volcano_pipelines.errors import VpipeError, WorkFailed
from volcano_pipelines.kfp import runtime
from volcano_pipelines.steps._serve import serve
from volcano_pipelines.steps._train import train_tf


@dataclass
class FakeResult:
    n: int
    succeeded: bool = True
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Odd(VpipeError):
    exit_code = 7

    def __init__(self, message: str, result: FakeResult | None = None) -> None:
        super().__init__(message)
        if result is not None:
            self.result = result


class Recorder:
    instances: list[Recorder] = []

    def __init__(self, stream: Any) -> None:
        self.closed = False
        Recorder.instances.append(self)

    def note(self, line: str) -> None:
        pass

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def step(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    Recorder.instances = []
    monkeypatch.setattr(progress_module, "LineProgress", Recorder)
    monkeypatch.setattr(progress_module, "configure_logging", lambda *a, **k: None)
    monkeypatch.setitem(runtime._REPORTS, "FakeResult", (lambda d: {"n": float(d["n"])}, lambda d: f"# n={d['n']} ü"))
    monkeypatch.setattr(runtime, "outputs_of", lambda _step, result: {"n": result.n})

    def use(fn: Any) -> None:
        monkeypatch.setattr(runtime, "step_function", lambda _name: fn)

    return use


def _run(tmp_path: Path, arguments: dict[str, Any]) -> tuple[tuple[Any, ...], Metrics, Path]:
    metrics, summary = Metrics(), tmp_path / "summary.md"
    return runtime.run_step("fake", arguments, metrics=metrics, summary=Markdown(summary)), metrics, summary


def test_the_final_status_becomes_the_exit_handlers_arguments(step, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    seen: dict[str, Any] = {}

    def finish(pipeline_state: str = "", error_message: str = "", other: int = 0) -> FakeResult:
        seen.update(pipeline_state=pipeline_state, error_message=error_message, other=other)
        return FakeResult(1)

    step(finish)

    class Status:
        state = "FAILED"
        error_message = None

    values, metrics, summary = _run(tmp_path, {"status": Status(), "other": 3})
    assert seen == {"pipeline_state": "FAILED", "error_message": "", "other": 3}
    assert values == (1,) and metrics.metadata == {"n": 1.0}
    assert summary.read_text(encoding="utf-8") == "# n=1 ü"
    Status.error_message = "task x failed"  # type: ignore[assignment]
    _run(tmp_path, {"status": Status()})
    assert seen["error_message"] == "task x failed"


def test_progress_only_for_steps_that_take_it_and_always_closed(step, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    got: list[Any] = []

    def with_progress(n: int = 0, progress: Any = None) -> FakeResult:
        got.append(progress)
        return FakeResult(n)

    step(with_progress)
    assert _run(tmp_path, {"n": 2})[0] == (2,)
    assert isinstance(got[0], Recorder) and got[0].closed

    def without(n: int = 0) -> FakeResult:
        return FakeResult(n)

    step(without)
    Recorder.instances = []
    assert _run(tmp_path, {"n": 3})[0] == (3,) and Recorder.instances == []

    def failing(progress: Any = None) -> FakeResult:
        raise Odd("broken")

    step(failing)
    with pytest.raises(SystemExit):
        _run(tmp_path, {})
    assert Recorder.instances[-1].closed


def test_a_failure_with_a_partial_result_reports_it_and_exits_with_its_code(step, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    def partial() -> FakeResult:
        raise Odd("half done", FakeResult(5, succeeded=False))

    step(partial)
    metrics, summary = Metrics(), tmp_path / "s.md"
    with pytest.raises(SystemExit) as stopped:
        runtime.run_step("fake", {}, metrics=metrics, summary=Markdown(summary))
    assert stopped.value.code == 7 and metrics.metadata == {"n": 5.0} and summary.read_text() == "# n=5 ü"
    assert capsys.readouterr().err == "vpipe: error: half done\n"

    def plain() -> FakeResult:
        raise Odd("nothing done")

    step(plain)
    with pytest.raises(SystemExit) as stopped:
        runtime.run_step("fake", {}, metrics=Metrics(), summary=Markdown(summary))
    assert stopped.value.code == 7 and "nothing done" in summary.read_text() and "fake" in summary.read_text()


def test_a_result_that_did_not_succeed_fails_the_task_after_reporting(step, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    step(lambda: FakeResult(4, succeeded=False, message="model not served"))
    metrics, summary = Metrics(), tmp_path / "s.md"
    with pytest.raises(SystemExit) as stopped:
        runtime.run_step("fake", {}, metrics=metrics, summary=Markdown(summary))
    assert stopped.value.code == WorkFailed.exit_code and metrics.metadata == {"n": 4.0}
    assert capsys.readouterr().err == "vpipe: error: model not served\n"
    step(lambda: FakeResult(4, succeeded=False))
    with pytest.raises(SystemExit):
        runtime.run_step("fake", {}, metrics=Metrics(), summary=Markdown(summary))
    assert capsys.readouterr().err == "vpipe: error: fake did not succeed\n"


def test_a_result_without_a_verdict_passes(step, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    del_verdict = type("FakeResult", (), {"n": 9, "to_dict": lambda self: {"n": 9}})()
    step(lambda: del_verdict)
    assert _run(tmp_path, {})[0] == (9,)


def test_integers_are_coerced_only_where_the_hint_says_int() -> None:
    got = runtime.step_arguments(serve, {"versions": [1.0, 2.0], "replicas": 2.0})
    assert got["versions"] == [1, 2] and all(type(v) is int for v in got["versions"]) and type(got["replicas"]) is int
    kept = runtime.step_arguments(train_tf, {"args": [1.0], "env": {"A": 1.0}, "labels": {"a": 2.0}})
    assert kept["args"] == [1.0] and type(kept["args"][0]) is float
    assert type(kept["env"]["A"]) is float and type(kept["labels"]["a"]) is float
    assert runtime.step_arguments(serve, {"versions": [1.5]})["versions"] == [1.5]  # not integral: the step refuses it


_NON_ASCII_STEP = """
import sys
from volcano_pipelines.kfp import runtime

class Artifact:
    path = sys.argv[1]

class Metrics:
    def log_metric(self, name, value):
        pass

runtime.run_step("serve", {"name": "mod\\u00e8l", "pvc": "logs"}, metrics=Metrics(), summary=Artifact())
"""


def test_the_summary_does_not_depend_on_the_pods_locale(tmp_path: Path) -> None:
    """A step pod without a locale (LC_ALL=C, no UTF-8 mode): a value typed into the KFP UI with
    a non-ASCII character still ends as the one-line error and the same UTF-8 summary as here,
    not a traceback. (The run here also lets scripts/mutation see that this test covers the
    summary writer: it cannot see into the child process.)"""
    here = tmp_path / "here.md"
    with pytest.raises(SystemExit) as stopped:
        runtime.run_step("serve", {"name": "mod\u00e8l", "pvc": "logs"}, metrics=Metrics(), summary=Markdown(here))
    assert stopped.value.code == 2
    summary = tmp_path / "summary.md"
    source = str(Path(runtime.__file__).resolve().parents[2])  # the code under test, not another install of it
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
    env.pop("LANG", None)
    done = subprocess.run([sys.executable, "-c", _NON_ASCII_STEP, str(summary)], env=env, capture_output=True,
                          text=True, encoding="utf-8", errors="replace", timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("vpipe: error: invalid name=") and "Traceback" not in done.stderr
    assert "invalid name='mod\u00e8l'" in summary.read_text(encoding="utf-8")
    assert summary.read_bytes() == here.read_bytes()
