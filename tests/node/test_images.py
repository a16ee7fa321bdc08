"""The node's image archives: docker-archive layout that `ctr images import` reads,
reproducible bytes (their digest is the import cache key), a config that names the layer."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from tests.node import images


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_archive_is_a_docker_archive_whose_config_names_its_layer(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF fake")
    entries = [*images.base_dirs(), images.Entry("bin/tool", "file", binary.read_bytes()),
               images.Entry("bin/sh", "symlink", target="tool")]
    digest = images.write_image(tmp_path / "img.tar", "localhost/vpipe-test/x:1", entries, cmd=["sh"])

    files = _members(tmp_path / "img.tar")
    assert hashlib.sha256((tmp_path / "img.tar").read_bytes()).hexdigest() == digest
    [manifest] = json.loads(files["manifest.json"])
    assert manifest["RepoTags"] == ["localhost/vpipe-test/x:1"]
    layer = files[manifest["Layers"][0]]
    config = json.loads(files[manifest["Config"]])
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer).hexdigest()}"]
    assert config["config"]["Cmd"] == ["sh"] and config["os"] == "linux"
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "tool"
    assert members["tmp"].mode == 0o1777
    assert members["bin/tool"].size == len(b"\x7fELF fake")


def test_same_content_gives_the_same_bytes(tmp_path: Path) -> None:
    entries = [images.Entry("pause", "file", b"x")]
    first = images.write_image(tmp_path / "a.tar", "localhost/vpipe-test/p:1", entries, entrypoint=["/pause"])
    second = images.write_image(tmp_path / "b.tar", "localhost/vpipe-test/p:1", list(reversed(entries)),
                                entrypoint=["/pause"])
    changed = images.write_image(tmp_path / "c.tar", "localhost/vpipe-test/p:1", [images.Entry("pause", "file", b"y")],
                                 entrypoint=["/pause"])
    assert first == second
    assert first != changed
