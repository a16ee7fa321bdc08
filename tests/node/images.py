"""Tiny container images for the test node, written as docker-archive tarballs.

No registry can be reached from this machine, so the node's images are made here: a
single-layer root file system (a static binary and a few directories) plus an image
config, in the layout `docker save` writes and `ctr images import` reads. The tarballs are
byte-for-byte reproducible (fixed timestamps and owners), so their digest is a stable cache
key for `RealNode.import_image`.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    """One path in an image's root file system."""

    path: str  # relative, e.g. "bin/sh"
    kind: str  # "file" | "dir" | "symlink"
    data: bytes = b""  # file content
    target: str = ""  # symlink target
    mode: int = 0o755


def _tar_info(entry: Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.path)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = entry.mode
    if entry.kind == "dir":
        info.type = tarfile.DIRTYPE
    elif entry.kind == "symlink":
        info.type = tarfile.SYMTYPE
        info.linkname = entry.target
        info.mode = 0o777
    else:
        info.size = len(entry.data)
    return info


def layer_tar(entries: list[Entry]) -> bytes:
    """An uncompressed layer tarball of ``entries`` (sorted, so the bytes are stable)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(entries, key=lambda e: e.path):
            info = _tar_info(entry)
            tar.addfile(info, io.BytesIO(entry.data) if entry.kind == "file" else None)
    return buffer.getvalue()


def image_config(layer_digest: str, entrypoint: list[str], cmd: list[str], env: list[str]) -> dict:
    """The image configuration (OCI/Docker image config schema, linux/amd64)."""
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Entrypoint": entrypoint or None, "Cmd": cmd or None, "Env": env, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tests/node/images.py"}],
    }


def write_image(
    out: Path,
    name: str,
    entries: list[Entry],
    entrypoint: list[str] | None = None,
    cmd: list[str] | None = None,
    env: list[str] | None = None,
) -> str:
    """Write a docker-archive tarball holding image ``name`` (a full reference such as
    ``localhost/vpipe-test/busybox:TAG``) to ``out``; return the archive's sha256."""
    layer = layer_tar(entries)
    layer_hex = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        image_config(f"sha256:{layer_hex}", entrypoint or [], cmd or [], env or ["PATH=/bin"]),
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [name], "Layers": [f"{layer_hex}/layer.tar"]}]
    ).encode()
    files = {f"{layer_hex}/layer.tar": layer, config_name: config, "manifest.json": manifest}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.mtime, info.mode, info.size = 0, 0o644, len(data)
            tar.addfile(info, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buffer.getvalue())
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def base_dirs() -> list[Entry]:
    """Directories every image gets: mount points the runtime fills (/proc, /sys, /dev,
    /etc for hosts/resolv.conf) and a world-writable /tmp."""
    return [Entry(d, "dir") for d in ("bin", "dev", "etc", "proc", "sys")] + [Entry("tmp", "dir", mode=0o1777)]


def pause_entries(pause_binary: Path) -> list[Entry]:
    return [*base_dirs(), Entry("pause", "file", pause_binary.read_bytes())]


def busybox_entries(busybox_binary: Path, applets: list[str]) -> list[Entry]:
    """A root file system with a static busybox and one symlink per applet in /bin."""
    links = [Entry(f"bin/{a}", "symlink", target="busybox") for a in applets if a not in ("busybox", "")]
    return [*base_dirs(), Entry("bin/busybox", "file", busybox_binary.read_bytes()), *links]
