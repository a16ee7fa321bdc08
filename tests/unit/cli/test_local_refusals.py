"""`vpipe train --backend local` refusing directories before anything starts (issue 33, items 4
and 12): a data directory that does not exist is a typo (exit 2, nothing created), and an empty
path is not silently `./vpipe-local`. Refused before any process starts, so no TensorFlow here."""

from __future__ import annotations

from pathlib import Path

import pytest

from volcano_pipelines.cli import main

TRAIN = ["train", "tf", "--name", "j", "--backend", "local", "--code-url", "http://127.0.0.1:9/"]


def test_a_data_directory_that_does_not_exist_is_refused_and_not_created(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing, work = tmp_path / "nonexistent", tmp_path / "work"
    code = main([*TRAIN, "--local-dir", str(work), "--local-data-dir", str(missing)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"invalid --local-data-dir={str(missing)!r}: an existing directory" in err and "Traceback" not in err
    assert not missing.exists() and not work.exists()


@pytest.mark.parametrize("flag", ["--local-dir", "--local-data-dir", "--local-log-dir"])
def test_an_empty_directory_path_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    monkeypatch.chdir(tmp_path)
    argv = [*TRAIN, flag, ""] if flag == "--local-dir" else [*TRAIN, "--local-dir", str(tmp_path / "w"), flag, ""]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"invalid {flag}='': a directory path (not empty)" in err
    assert list(tmp_path.iterdir()) == []  # neither ./vpipe-local nor the working directory
