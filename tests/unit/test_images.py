"""images/: what can be checked without building (tests/images builds and runs them)."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from images import build
from volcano_pipelines.images import IMAGES

ROOT = Path(__file__).resolve().parents[2]


def test_every_image_has_a_dockerfile_pinned_to_the_same_base() -> None:
    for name in IMAGES:
        dockerfile = (ROOT / "images" / name / "Dockerfile").read_text()
        assert re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.M) == [build.BASE_IMAGE], name
        # Every stage starts from the pinned base, never from a floating tag.
        assert set(re.findall(r"^FROM (\S+)", dockerfile, re.M)) == {"${BASE_IMAGE}"}, name


def test_image_pins_equal_the_package_pins() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pinned = dict(re.match(r"([A-Za-z0-9_.-]+)==(\S+)", spec).groups() for spec in extras["train"])  # type: ignore[union-attr]
    for name in ("trainer-tf", "tensorboard"):
        lines = [line for line in (ROOT / "images" / name / "requirements.txt").read_text().splitlines()
                 if line and not line.startswith("#")]
        for line in lines:
            package, version = line.split("==")
            assert pinned[package] == version, f"images/{name}/requirements.txt pins {line}, pyproject {pinned[package]}"


def test_content_hash_follows_every_byte_of_the_image_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "images" / "trainer-mpi", tmp_path / "trainer-mpi")
    monkeypatch.setattr(build, "IMAGES_DIR", tmp_path)
    before = build.content_hash("trainer-mpi", Path(), "base-1")
    assert build.content_hash("trainer-mpi", Path(), "base-1") == before
    assert build.content_hash("trainer-mpi", Path(), "base-2") != before  # a new base rebuilds
    script = tmp_path / "trainer-mpi" / "start-sshd"
    script.chmod(0o644)
    assert build.content_hash("trainer-mpi", Path(), "base-1") != before  # the mode counts
    script.chmod(0o755)
    script.write_text(script.read_text() + "\n")
    assert build.content_hash("trainer-mpi", Path(), "base-1") != before


def test_unknown_image_name_is_refused_before_anything_runs() -> None:
    with pytest.raises(SystemExit, match="unknown image 'trainer-pytorch'; choose from runtime, trainer-tf"):
        build.build(["trainer-pytorch"], engine=build.Engine("no-such-engine"))
