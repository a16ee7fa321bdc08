"""Build what the real test node runs, cached by pin hash like the control plane.

* ``kubelet`` from the control plane's wrapper module (``tests/cluster/go/k8s``: the same
  pinned ``k8s.io/kubernetes`` and version ldflags as kube-apiserver);
* ``coredns`` from ``tests/node/go/coredns`` (a pinned CoreDNS with a few plugins);
* ``pause``: ``pause.c`` compiled with ``gcc -static``, the pod sandbox process;
* two image archives (``images.py``): the sandbox image and a busybox image (Debian's
  ``busybox-static``: sh, nc, nslookup, httpd; its wget crashes here) for the node's own tests.

Everything lands in ``~/.cache/volcano-pipelines/node/<pin-hash>/`` with a ``.complete``
marker; the hash covers the Go modules, the C source, the image writer, the busybox binary
and the Go / C compiler versions. Run it with ``python -m tests.cluster build --real-node``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.cluster import build as cluster_build
from tests.helpers.build_cache import PinHash, cached_build, is_complete
from tests.node import images

NODE_DIR = Path(__file__).resolve().parent
K8S_MODULE = cluster_build.GO_DIR / "k8s"
COREDNS_MODULE = NODE_DIR / "go" / "coredns"
PAUSE_SOURCE = NODE_DIR / "pause.c"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static
COREDNS_VERSION = "v1.15.0"  # repeated from go/coredns/go.mod for messages only
BINARIES = ("kubelet", "coredns", "pause")
IMAGES = ("pause", "busybox")
IMAGE_REPOSITORY = "localhost/vpipe-test"


class NodeBuildError(RuntimeError):
    """A tool the node build needs is missing (``ci_prepare.sh`` installs them)."""


@dataclass(frozen=True)
class NodeArtifacts:
    """A finished node build: binaries, image archives and the image names inside them."""

    directory: Path

    def binary(self, name: str) -> Path:
        return self.directory / name

    def image_archive(self, name: str) -> Path:
        return self.directory / "images" / f"{name}.tar"

    def image_name(self, name: str) -> str:
        return f"{IMAGE_REPOSITORY}/{name}:{self.directory.name}"

    @property
    def info(self) -> dict:
        return json.loads((self.directory / "versions.json").read_text())


def _module_files(module: Path) -> list[Path]:
    return sorted([module / "go.mod", module / "go.sum", *module.rglob("*.go")])


def _tool_version(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def missing_tools() -> list[str]:
    """Tools the build needs that are not on this machine."""
    missing = [] if cluster_build.go_available() else ["go"]
    if not shutil.which("gcc"):
        missing.append("gcc")
    if not BUSYBOX.exists():
        missing.append(f"{BUSYBOX} (Debian package busybox-static)")
    return missing


def pin_hash() -> str:
    """Hash of everything that decides what the node's binaries and images are."""
    key = PinHash()
    files = [*_module_files(K8S_MODULE), *_module_files(COREDNS_MODULE), PAUSE_SOURCE,
             Path(images.__file__), Path(__file__)]
    for path in files:
        key.file(path, path.name)
    key.data(hashlib.sha256(BUSYBOX.read_bytes()).digest())
    key.data(cluster_build.go_version())
    key.data(_tool_version(["gcc", "-dumpfullversion"]))
    return key.key()


def node_dir() -> Path:
    return cluster_build.cache_root() / "node" / pin_hash()


def _has_artifacts(directory: Path) -> bool:
    return all((directory / name).exists() for name in BINARIES) and all(
        (directory / "images" / f"{name}.tar").exists() for name in IMAGES)


def is_built(directory: Path) -> bool:
    return is_complete(directory, _has_artifacts)


def build(force: bool = False, log: Callable[[str], None] = print) -> NodeArtifacts:
    """Build the node's binaries and images unless this pin hash already has them."""
    missing = missing_tools()
    if missing:
        raise NodeBuildError(f"cannot build the real test node, missing: {', '.join(missing)} "
                             "(run tests/cluster/ci_prepare.sh)")
    directory = node_dir()
    # One build at a time per cache, staged and renamed into place (tests/helpers/build_cache.py).
    cached_build(directory, lambda staging: _build_into(staging, directory, log), contents=_has_artifacts,
                 force=force, log=log, up_to_date="real-node binaries up to date")
    return NodeArtifacts(directory)


def _build_into(staging: Path, directory: Path, log: Callable[[str], None]) -> None:
    (staging / "images").mkdir(parents=True)
    env = cluster_build.go_env()
    seconds: dict[str, float] = {}
    started = time.monotonic()

    def timed(name: str, step: Callable[[], None]) -> None:
        t0 = time.monotonic()
        log(f"building {name}")
        step()
        seconds[name] = round(time.monotonic() - t0, 1)
        log(f"  {name}: {seconds[name]:.0f}s")

    def go_build(module: Path, package: str, out: str, ldflags: str) -> None:
        subprocess.run([cluster_build.go_binary(), "build", "-trimpath", "-ldflags", ldflags,
                        "-o", str(staging / out), package], cwd=module, env=env, check=True)

    k8s_ldflags = f"{cluster_build.COMMON_LDFLAGS} {cluster_build._k8s_ldflags()}"
    timed("kubelet", lambda: go_build(K8S_MODULE, "k8s.io/kubernetes/cmd/kubelet", "kubelet", k8s_ldflags))
    timed("coredns", lambda: go_build(COREDNS_MODULE, ".", "coredns", cluster_build.COMMON_LDFLAGS))
    timed("pause", lambda: subprocess.run(
        ["gcc", "-static", "-Os", "-s", "-o", str(staging / "pause"), str(PAUSE_SOURCE)], check=True))

    tag = directory.name
    digests: dict[str, str] = {}

    def make_images() -> None:
        digests["pause"] = images.write_image(
            staging / "images" / "pause.tar", f"{IMAGE_REPOSITORY}/pause:{tag}",
            images.pause_entries(staging / "pause"), entrypoint=["/pause"])
        applets = _tool_version([str(BUSYBOX), "--list"]).split()
        digests["busybox"] = images.write_image(
            staging / "images" / "busybox.tar", f"{IMAGE_REPOSITORY}/busybox:{tag}",
            images.busybox_entries(BUSYBOX, applets), cmd=["sh"])

    timed("images", make_images)
    info = {
        "kubernetes": cluster_build.KUBERNETES_VERSION,
        "coredns": COREDNS_VERSION,
        "go": cluster_build.go_version(),
        "gcc": _tool_version(["gcc", "-dumpfullversion"]),
        "images": {name: {"name": f"{IMAGE_REPOSITORY}/{name}:{tag}", "sha256": digests[name]}
                   for name in IMAGES},
        "build_seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
    }
    (staging / "versions.json").write_text(json.dumps(info, indent=2) + "\n")
    log(f"built the real-node binaries and images in {info['build_seconds']['total']}s: {directory}")
