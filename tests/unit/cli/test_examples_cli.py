"""`vpipe examples --out DIR` and `vpipe quickstart`: the examples this install ships (in a
checkout, examples/ itself; in a wheel, volcano_pipelines._examples: tests/packaging checks
that one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from volcano_pipelines.cli import main
from volcano_pipelines.examples import examples_dir

REPO = Path(__file__).resolve().parents[3]
TRACKED = sorted(subprocess.run(["git", "-C", str(REPO), "ls-files", "examples"], capture_output=True, text=True,
                                check=True).stdout.split())


def test_the_examples_found_are_the_repositorys() -> None:
    assert examples_dir().resolve() == (REPO / "examples").resolve()


def test_examples_out_copies_every_tracked_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "examples"
    assert main(["examples", "--out", str(out)]) == 0
    written = sorted(str(p.relative_to(tmp_path / "new")) for p in out.rglob("*") if p.is_file())
    assert written == TRACKED
    for name in TRACKED:
        assert (tmp_path / "new" / name).read_bytes() == (REPO / name).read_bytes(), name
    assert os.access(out / "tf-ps" / "run.sh", os.X_OK)
    assert f"wrote {len(TRACKED)} files" in capsys.readouterr().err


def test_examples_out_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tf-ps").mkdir()
    (tmp_path / "tf-ps" / "train.py").write_text("mine")
    assert main(["examples", "--out", str(tmp_path)]) == 2
    assert "invalid --out=" in capsys.readouterr().err
    assert (tmp_path / "tf-ps" / "train.py").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["tf-ps", "train.py"]  # nothing else written
    (tmp_path / "file").write_text("x")
    assert main(["examples", "--out", str(tmp_path / "file")]) == 2


def test_quickstart_render_prints_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quickstart", "--render", "--code-url", "http://code.example/tf-ps/"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("apiVersion: batch.volcano.sh/v1alpha1") and "http://code.example/tf-ps/" in out


def test_quickstart_without_tensorflow_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorflow" else real(name, *a))
    assert main(["quickstart", "--workdir", str(tmp_path / "w")]) == 2
    assert "pip install 'volcano-pipelines[train]'" in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_the_copied_quickstart_runs_on_its_own(tmp_path: Path) -> None:
    assert main(["examples", "--out", str(tmp_path / "ex")]) == 0
    done = subprocess.run([sys.executable, str(tmp_path / "ex" / "quickstart.py"), "--render"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "kind: Job" in done.stdout, done.stderr


def test_an_install_without_examples_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from volcano_pipelines import examples
    from volcano_pipelines.cli import examples as cli_examples

    def missing() -> Path:
        raise examples.ExamplesMissing("this install has no examples")

    monkeypatch.setattr(examples, "examples_dir", missing)
    monkeypatch.setattr(cli_examples, "examples_dir", missing)
    assert main(["quickstart"]) == 1
    assert main(["examples", "--out", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert err.count("vpipe: error: this install has no examples") == 2 and "Traceback" not in err
    assert not (tmp_path / "x").exists()
