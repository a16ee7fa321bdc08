"""Values a user can type that once ended in a traceback or silently meant something else
(issue 24, items 6 and 12): each is exit 2 naming the flag, or is honoured; `vpipe compile`
writes all of its files or none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import needs
from tests.helpers.renders import share_renders
from volcano_pipelines.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("argv", "flag"), [
    (["tensorboard", "--name", "tb", "--log-pvc", "logs", "--ttl", "1e12"], "--ttl"),
    (["tensorboard", "--name", "tb", "--log-pvc", "logs", "--ttl", "inf"], "--ttl"),
    (["tensorboard", "--name", "tb", "--log-pvc", "logs", "--timeout", "1e400"], "--timeout"),
    (["serve", "--name", "s", "--pvc", "logs", "--timeout", "1e400"], "--timeout"),
    (["serve", "--name", "s", "--pvc", "logs", "--timeout", "nan"], "--timeout"),
    (["train", "tf", "--name", "m", "--code-url", "http://x/", "--timeout", "1e400"], "--timeout"),
    (["serve", "--name", "s", "--pvc", "logs", "--model-path", "/etc"], "--model-path"),
    (["tensorboard", "--name", "tb", "--log-pvc", "logs", "--logdir", "/abs"], "--logdir"),
    (["serve", "--name", "s", "--pvc", "logs", "--smoke-payload", '{"instances": NaN}'], "--smoke-payload"),
    (["serve", "--name", "s", "--pvc", "logs", "--smoke-payload", '{"instances": [[Infinity]]}'], "--smoke-payload"),
    (["tensorboard", "--name", "tb", "--log-pvc", "logs", "--label", "app.kubernetes.io/managed-by=evil"], "--label"),
    (["serve", "--name", "s", "--pvc", "logs", "--label", "volcano-pipelines/run=someone-else"], "--label"),
    (["render", "tf", "--name", "m", "--code-url", "http://x/", "--label", "app.kubernetes.io/managed-by=evil"], "--label"),
    (["render", "tf", "--name", "m", "--code-url", "http://x/", "--label", "volcano-pipelines/step=serve"], "--label"),
    (["render", "tf", "--name", "m", "--code-url", "http://x/", "--pod-label", "volcano-pipelines/run=x"], "--pod-label"),
])
def test_hostile_values_exit_2_naming_the_flag(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    dry = [] if argv[0] == "render" else ["--dry-run"]
    code, err = _run(capsys, *argv, *dry)
    assert code == 2, err
    assert f"invalid {flag}=" in err, err


def test_relative_paths_and_own_labels_are_still_honoured(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(capsys, "serve", "--name", "s", "--pvc", "logs", "--model-path", "export/mnist", "--smoke-payload",
                     '{"instances": [[1.0]]}', "--label", "team=ml", "--dry-run")
    assert code == 0, err
    # The sweeper's opt-in label (manifests/sweeper) is the user's to give: only the identity labels are reserved.
    code, err = _run(capsys, "tensorboard", "--name", "tb", "--log-pvc", "logs", "--logdir", "runs/a", "--ttl", "86400",
                     "--label", "volcano-pipelines/reap=true", "--dry-run")
    assert code == 0, err
    code, err = _run(capsys, "render", "tf", "--name", "m", "--code-url", "http://x/", "--label",
                     "volcano-pipelines/reap=true", "--pod-label", "volcano-pipelines/reap=true")
    assert code == 0, err


# --- vpipe compile: all or nothing -------------------------------------------------------------


@pytest.fixture()
def shared_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each front end renders once per runtime image for the session (tests/helpers/renders.py):
    these tests check how `vpipe compile` writes the files, not the text, which the freshness
    tests check."""
    share_renders(monkeypatch)


def _compile(capsys: pytest.CaptureFixture[str], root: Path, *extra: str) -> tuple[int, str]:
    needs.module("kfp", "the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")
    return _run(capsys, "compile", "--root", str(root), *extra)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.usefixtures("shared_renders")
def test_compile_with_a_directory_where_a_file_goes_writes_nothing(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "components" / "sync.yaml").mkdir(parents=True)
    before = _files(tmp_path)
    code, err = _compile(capsys, tmp_path)
    assert code == 2 and "components/sync.yaml exists and is not a regular file" in err, err
    assert _files(tmp_path) == before  # before the fix: 3 of 18 files written, then a traceback


@pytest.mark.usefixtures("shared_renders")
def test_compile_with_a_file_where_a_directory_goes_writes_nothing(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "components").write_text("not a directory")
    code, err = _compile(capsys, tmp_path)
    assert code == 2 and "components is a file, not a directory" in err, err
    assert _files(tmp_path) == ["components"]


@pytest.mark.usefixtures("shared_renders")
def test_compile_into_an_unwritable_root_is_one_error_and_nothing_changed(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _compile(capsys, Path("/proc"))
    assert code == 1 and "nothing was changed" in err and "Traceback" not in err, err
    if os.geteuid() != 0:  # root writes anywhere; as another user a read-only directory shows the same
        (tmp_path / "ro").mkdir(mode=0o555)
        code, err = _compile(capsys, tmp_path / "ro")
        assert code == 1 and _files(tmp_path / "ro") == []


@pytest.mark.usefixtures("shared_renders")
def test_a_failure_while_staging_removes_what_was_staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The disk fills up at the 5th file: no staged file, no new directory, no old file touched."""
    import tempfile as tempfile_module

    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "train-and-serve.yaml").write_text("old\n")
    real = tempfile_module.mkstemp
    calls = {"n": 0}

    def failing(*args: object, **kwargs: object) -> tuple[int, str]:
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device", str(kwargs.get("dir")))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tempfile_module, "mkstemp", failing)
    code, err = _compile(capsys, tmp_path)
    assert code == 1 and "No space left on device" in err and "nothing was changed" in err, err
    assert _files(tmp_path) == ["pipelines", "pipelines/train-and-serve.yaml"]
    assert (tmp_path / "pipelines" / "train-and-serve.yaml").read_text() == "old\n"


@pytest.mark.usefixtures("shared_renders")
def test_compile_writes_then_checks_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _compile(capsys, tmp_path)
    assert code == 0, err
    assert (tmp_path / "components" / "sync.yaml").stat().st_mode & 0o777 == 0o644
    assert not [p for p in _files(tmp_path) if "vpipe-tmp" in p]
    code, err = _compile(capsys, tmp_path, "--check")
    assert code == 0, err


def test_argo_compile_help_writes_nothing(tmp_path: Path) -> None:
    needs.module("hera", "the hera extra is not installed (pip install 'volcano-pipelines[hera]')")
    done = subprocess.run([sys.executable, "-m", "volcano_pipelines.argo.compile", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage:"), done.stderr
    assert list(tmp_path.iterdir()) == []  # before: a directory named --help, full of YAML
    done = subprocess.run([sys.executable, "-m", "volcano_pipelines.argo.compile", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "pipelines" / "argo" / "train-and-serve.yaml").is_file()
