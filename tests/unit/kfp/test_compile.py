"""The committed KFP artifacts are what the code renders now (VPIPE_UPDATE_GOLDEN=1
regenerates them), and `vpipe compile [--check]` writes / checks them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import needs

needs.module("kfp", "the kfp extra is not installed (pip install 'volcano-pipelines[kfp]')")

from tests.golden_files import check_golden
from tests.helpers import renders
from volcano_pipelines.cli import compile as compile_cli
from volcano_pipelines.cli import main
from volcano_pipelines.kfp import compile as kfp_compile
from volcano_pipelines.steps.registry import KFP, steps_for

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    return renders.rendered(kfp_compile.__name__)  # kfp_compile.artifacts(), rendered once per session


@pytest.fixture()
def shared_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each front end renders once per runtime image for the session (tests/helpers/renders.py):
    these tests check what `vpipe compile` does with the text; the freshness tests above check
    the text."""
    renders.share_renders(monkeypatch)


def test_artifact_paths(rendered: dict[str, str]) -> None:
    # One component per KFP step of the registry, one file per pipeline.
    assert set(rendered) == {f"components/{item.name}.yaml" for item in steps_for(KFP)} | {
        "pipelines/train-and-serve.yaml", "pipelines/train-and-serve-mpi.yaml"}
    assert all(text.startswith(kfp_compile.HEADER) for text in rendered.values())


@pytest.mark.parametrize("path", sorted(list(kfp_compile.COMPONENT_FILES.values()) + list(kfp_compile.PIPELINE_FILES.values())))
def test_committed_artifact_is_fresh(rendered: dict[str, str], path: str) -> None:
    check_golden(REPO / path, rendered[path])


@pytest.mark.usefixtures("shared_renders")
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


@pytest.mark.usefixtures("shared_renders")
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


@pytest.mark.usefixtures("shared_renders")
def test_argo_artifacts_join_when_that_front_end_is_there(rendered: dict[str, str]) -> None:
    everything = compile_cli.all_artifacts()
    assert set(rendered) <= set(everything)


PRIVATE_IMAGE = "registry.example:5000/ml-platform/vpipe-runtime:0.1.0-custom"


def _images(node: object, found: list[str]) -> list[str]:
    """Every `image` of a container anywhere in a YAML tree (KFP executors, Argo templates)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "container" and isinstance(value, dict) and "image" in value:
                found.append(value["image"])
            _images(value, found)
    elif isinstance(node, list):
        for item in node:
            _images(item, found)
    return found


@pytest.mark.usefixtures("shared_renders")
def test_runtime_image_override_reaches_components_pipelines_and_argo_templates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vpipe compile --runtime-image`: a private registry's name for the runtime image in every
    file that names it (no hand-editing of "do not edit" files), and nothing else changed."""
    import yaml
    from kfp import components as kfp_components

    from volcano_pipelines.images import RUNTIME_IMAGE

    assert main(["compile", "--root", str(tmp_path), "--runtime-image", PRIVATE_IMAGE]) == 0
    capsys.readouterr()
    default = compile_cli.all_artifacts()
    naming = [path for path, text in default.items() if RUNTIME_IMAGE in text]
    # 7 components, 2 KFP pipelines, and the Argo templates (every step's and train-and-serve).
    assert {p for p in naming if not p.startswith("pipelines/argo/")} == set(rendered_paths := [
        *kfp_compile.COMPONENT_FILES.values(), *kfp_compile.PIPELINE_FILES.values()]), rendered_paths
    assert len([p for p in naming if p.startswith("pipelines/argo/")]) >= 7
    for path, text in default.items():
        written = (tmp_path / path).read_text(encoding="utf-8")
        assert RUNTIME_IMAGE not in written, path
        # Only the image differs from the default rendering.
        assert written.replace(PRIVATE_IMAGE, RUNTIME_IMAGE) == text, path
        images = _images(list(yaml.load_all(written, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))), [])  # libyaml: same objects, less CPU
        if path in naming:
            assert images and set(images) == {PRIVATE_IMAGE}, (path, images)
    loaded = kfp_components.load_component_from_file(str(tmp_path / "components" / "train_tf.yaml"))
    assert loaded.component_spec.implementation.container.image == PRIVATE_IMAGE

    # --check compares against the files rendered with the same image.
    assert main(["compile", "--check", "--root", str(tmp_path), "--runtime-image", PRIVATE_IMAGE]) == 0
    assert main(["compile", "--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{len(naming)} of {len(default)} generated files are stale" in err


@pytest.mark.parametrize("bad", ["", "registry.example/ML/runtime:1", "registry.example/ml/runtime",
                                 "registry.example/ml/runtime:1 --privileged", "ml/runtime:-1", "ml/runtime@sha256:abc"])
def test_a_bad_runtime_image_is_refused_and_nothing_is_written(bad: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", "--root", str(tmp_path), "--runtime-image", bad]) == 2
    assert "invalid --runtime-image=" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("good", ["runtime:1", "localhost:5000/runtime:0.1.0", "a.b.c/d/e__f/g-h:v1.2_rc",
                                  "reg.example/ml/runtime@sha256:" + "a" * 64,
                                  "reg.example/ml/runtime:1@sha256:" + "0" * 64])
def test_runtime_image_references_with_a_tag_or_digest_are_taken(good: str) -> None:
    from volcano_pipelines.generated import runtime_image

    assert runtime_image(good) == good


def test_hera_without_kfp_compiles_the_argo_templates(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33, item 9: `[hera]` alone gives the Argo templates in `vpipe compile`, as the README
    says (before: refused without kfp), naming the runtime image asked for."""
    for name in [m for m in sys.modules if m == "kfp" or m.startswith(("kfp.", "volcano_pipelines.kfp"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kfp", None)  # `import kfp` now fails as when it is not installed
    out = tmp_path / "artifacts"
    assert main(["compile", "--root", str(out), "--runtime-image", "registry.example/ml/runtime:1.2"]) == 0
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*.yaml"))
    assert written and all(p.startswith("pipelines/argo/") for p in written), written
    assert "registry.example/ml/runtime:1.2" in (out / "pipelines" / "argo" / "train-tf.yaml").read_text()
    assert "KFP components and pipelines are not compiled" in capsys.readouterr().err


def test_argo_compile_module_takes_root_and_runtime_image(tmp_path: Path) -> None:
    from volcano_pipelines.argo import compile as argo_compile

    assert argo_compile.main(["--root", str(tmp_path), "--runtime-image", "registry.example/rt:9"]) == 0
    assert "registry.example/rt:9" in (tmp_path / "pipelines" / "argo" / "sync.yaml").read_text()
