"""The committed KFP artifacts are what the code renders now (VPIPE_UPDATE_GOLDEN=1
regenerates them), and `vpipe compile [--check]` writes / checks them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import needs

needs.module("kfp", "the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")

from tests.golden_files import check_golden
from volcano_pipelines.cli import compile as compile_cli
from volcano_pipelines.cli import main
from volcano_pipelines.kfp import compile as kfp_compile

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return kfp_compile.artifacts()


def test_artifact_paths(rendered: dict[str, str]) -> None:
    assert set(rendered) == {"components/sync.yaml", "components/train_tf.yaml", "components/train_mpi.yaml",
                             "components/finish_run.yaml", "components/reap.yaml", "components/tensorboard.yaml",
                             "components/serve.yaml", "pipelines/train-and-serve.yaml",
                             "pipelines/train-and-serve-mpi.yaml"}
    assert all(text.startswith(kfp_compile.HEADER) for text in rendered.values())


@pytest.mark.parametrize("path", sorted(list(kfp_compile.COMPONENT_FILES.values()) + list(kfp_compile.PIPELINE_FILES.values())))
def test_committed_artifact_is_fresh(rendered: dict[str, str], path: str) -> None:
    check_golden(REPO / path, rendered[path])


def test_compile_writes_then_check_passes_then_names_a_stale_file(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "stale: components/sync.yaml (missing)" in err and "stale: pipelines/train-and-serve.yaml (missing)" in err

    assert main(["compile", "--root", str(tmp_path)]) == 0
    assert "wrote components/train_tf.yaml" in capsys.readouterr().out
    assert main(["compile", "--check", "--root", str(tmp_path)]) == 0
    capsys.readouterr()

    (tmp_path / "components" / "sync.yaml").write_text("# edited by hand\n")
    assert main(["compile", "--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "stale: components/sync.yaml (differs)" in err
    assert "train_tf" not in err

    # Writing rewrites only what differs.
    assert main(["compile", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("wrote ") == 1 and "wrote components/sync.yaml" in out


def test_missing_root_is_bad_input_for_check_and_created_for_writing(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "--check", "--root", str(tmp_path / "nope")]) == 2
    assert "--root" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["compile", "--root", str(tmp_path / "file" / "below")]) == 2
    assert "--root" in capsys.readouterr().err
    assert main(["compile", "--root", str(tmp_path / "new" / "artifacts")]) == 0  # where a pip user wants them
    assert (tmp_path / "new" / "artifacts" / "components" / "train_tf.yaml").is_file()


def test_front_ends_that_are_not_installed_are_skipped_and_broken_ones_fail(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "vpipe_fake_front"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "compile.py").write_text("import vpipe_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(compile_cli, "FRONT_ENDS", ("volcano_pipelines.nothing_here.compile",))
    assert compile_cli.all_artifacts() == {}
    monkeypatch.setattr(compile_cli, "FRONT_ENDS", ("vpipe_fake_front.compile",))
    with pytest.raises(compile_cli.MissingExtra, match="vpipe_no_such_dependency.*pip install") as err:
        compile_cli.all_artifacts()
    assert err.value.exit_code == 2
    sys.modules.pop("vpipe_fake_front", None)


def test_without_hera_the_argo_templates_are_skipped_with_a_note(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """[kfp] without [hera]: KFP's files are compiled, Argo's skipped as the help says (before:
    a ModuleNotFoundError traceback from inside the Argo generator)."""
    for name in [m for m in sys.modules if m == "hera" or m.startswith(("hera.", "volcano_pipelines.argo"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hera", None)  # `import hera` now fails as when it is not installed
    everything = compile_cli.all_artifacts()
    assert everything and not [p for p in everything if p.startswith("pipelines/argo/")]
    assert "Argo templates are not compiled" in capsys.readouterr().err


def test_argo_artifacts_join_when_that_front_end_is_there(rendered: dict[str, str]) -> None:
    everything = compile_cli.all_artifacts()
    assert set(rendered) <= set(everything)
