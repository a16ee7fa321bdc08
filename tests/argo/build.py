"""Build Argo Workflows' controller and executor for the test cluster, cached by pin hash.

* ``workflow-controller``: Argo's controller package started by our own small main
  (``tests/cluster/go/argo/controller``: upstream's main with leader election off, but its
  health check on loopback; upstream v4.0.5 hard-codes ``:6060`` on every interface);
* ``argoexec``: upstream's ``cmd/argoexec``, unchanged;
* ``images/argoexec.tar``: a one-layer image holding ``/bin/argoexec`` (``tests/node/images.py``),
  imported into the real node; step pods' init and wait containers run it.

Both come from the wrapper module ``tests/cluster/go/argo`` (``github.com/argoproj/argo-workflows/v4``
v4.0.5: the only release the Go module proxy serves). Module zips drop symbolic links, and
upstream's ``workflow/executor/osspecific/signal_linux.go`` is one (to ``signal_darwin.go``):
built from the module cache, ``argoexec`` fails with ``undefined: Setpgid``. So the build
copies the module once into the cache, recreates that one link, and builds a copy of the
wrapper whose ``go.mod`` replaces the module with the copy. Nothing of Argo's source is kept
in this repository.

Static binaries (``CGO_ENABLED=0 -trimpath -ldflags '-s -w'``) land in
``~/.cache/volcano-pipelines/argo/<pin-hash>/``; the hash covers the wrapper module, this file,
the image writer and the Go version. ``python -m tests.cluster build --argo``.

Security: v4.0.5 has published advisories (argo-server SSO, podSpecPatch and
template-referencing bypasses, artifact GC). They concern features this controller does not
run: there is no argo-server here, no SSO, no artifact repository or artifact GC, the
controller listens on loopback only and serves the tests' own workflows. Production
clusters should run Argo >= 4.0.6 or 4.1.x (docs/argo.md).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.cluster import build as cluster_build
from tests.helpers.build_cache import PinHash, cached_build, is_complete
from tests.node import images

ARGO_MODULE = "github.com/argoproj/argo-workflows/v4"
ARGO_VERSION = "v4.0.5"  # also in go/argo/go.mod; see the Security note above
WRAPPER = cluster_build.GO_DIR / "argo"
# The link that module zips drop (relative to the module root) and its target.
MISSING_LINK = ("workflow/executor/osspecific/signal_linux.go", "signal_darwin.go")
BINARIES = ("workflow-controller", "argoexec")
IMAGE_REPOSITORY = "localhost/vpipe-test"


@dataclass(frozen=True)
class ArgoArtifacts:
    """A finished Argo build: the binaries and the argoexec image archive."""

    directory: Path

    def binary(self, name: str) -> Path:
        return self.directory / name

    @property
    def executor_archive(self) -> Path:
        return self.directory / "images" / "argoexec.tar"

    @property
    def executor_image(self) -> str:
        return f"{IMAGE_REPOSITORY}/argoexec:{self.directory.name}"

    @property
    def info(self) -> dict:
        return json.loads((self.directory / "versions.json").read_text())


def _wrapper_files() -> list[Path]:
    return sorted([WRAPPER / "go.mod", WRAPPER / "go.sum", *WRAPPER.rglob("*.go")])


def pin_hash() -> str:
    key = PinHash()
    for path in [*_wrapper_files(), Path(__file__), Path(images.__file__)]:
        key.file(path, str(path.relative_to(cluster_build.GO_DIR.parents[2])))
    key.data(cluster_build.go_version())
    return key.key()


def argo_dir() -> Path:
    return cluster_build.cache_root() / "argo" / pin_hash()


def _has_artifacts(directory: Path) -> bool:
    return all((directory / n).exists() for n in BINARIES) and (directory / "images" / "argoexec.tar").exists()


def is_built(directory: Path | None = None) -> bool:
    return is_complete(directory or argo_dir(), _has_artifacts)


def missing_tools() -> list[str]:
    return [] if cluster_build.go_available() else ["go"]


def module_dir() -> Path:
    """Argo's module in the Go module cache (downloaded through the wrapper's go.sum)."""
    out = subprocess.run([cluster_build.go_binary(), "mod", "download", "-json", f"{ARGO_MODULE}@{ARGO_VERSION}"],
                         check=True, capture_output=True, text=True, env=cluster_build.go_env(), cwd=WRAPPER).stdout
    return Path(json.loads(out)["Dir"])


def crd_dir() -> Path:
    """Argo's CRDs with full schemas, from the module cache (never copied into this repo)."""
    return module_dir() / "manifests" / "base" / "crds" / "full"


def build(force: bool = False, log: Callable[[str], None] = print) -> ArgoArtifacts:
    """Build the controller, argoexec and its image unless this pin hash has them."""
    directory = argo_dir()
    # One build at a time per cache, staged and renamed into place (tests/helpers/build_cache.py).
    cached_build(directory, lambda staging: _build_into(staging, directory, log), contents=_has_artifacts,
                 force=force, log=log, up_to_date="Argo binaries up to date")
    return ArgoArtifacts(directory)


def _writable_copy(source: Path, target: Path, log: Callable[[str], None]) -> Path:
    """``source`` (read-only in the module cache) copied to ``target`` with the dropped link
    put back; reused when already complete."""

    def copy(partial: Path) -> None:
        partial.rmdir()  # copytree makes it
        shutil.copytree(source, partial, symlinks=True)
        for root, dirs, files in os.walk(partial):
            for name in dirs + files:
                path = Path(root) / name
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
        partial.chmod(partial.stat().st_mode | stat.S_IWUSR)
        link, link_target = MISSING_LINK
        if not (partial / link).exists():
            (partial / link).symlink_to(link_target)

    return cached_build(target, copy, log=log, up_to_date="writable copy up to date")


def _ldflags() -> str:
    # What upstream's Makefile sets, so `argoexec version` and the controller's user agent
    # name the release. The commit is not in the module zip: the version reads "v4.0.5+unknown".
    package = ARGO_MODULE
    return " ".join([cluster_build.COMMON_LDFLAGS, f"-X {package}.version={ARGO_VERSION}",
                     f"-X {package}.gitTag={ARGO_VERSION}", f"-X {package}.gitTreeState=clean",
                     f"-X {package}.buildDate=1970-01-01T00:00:00Z"])


def _build_into(staging: Path, directory: Path, log: Callable[[str], None]) -> None:
    (staging / "images").mkdir(parents=True)
    env = cluster_build.go_env()
    go = cluster_build.go_binary()
    seconds: dict[str, float] = {}
    started = time.monotonic()

    t0 = time.monotonic()
    log(f"preparing {ARGO_MODULE}@{ARGO_VERSION} (download and writable copy)")
    source = _writable_copy(module_dir(), cluster_build.cache_root() / "argo" / "src" / f"argo-workflows@{ARGO_VERSION}",
                            log)
    # A copy of the wrapper whose go.mod replaces the module with the copy above; the
    # committed wrapper stays a plain `require` that `go mod tidy` understands anywhere.
    module = staging / "module"
    for path in _wrapper_files():
        target = module / path.relative_to(WRAPPER)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    subprocess.run([go, "mod", "edit", f"-replace={ARGO_MODULE}={source}"], cwd=module, env=env, check=True)
    seconds["prepare"] = round(time.monotonic() - t0, 1)

    for name, package in (("workflow-controller", "./controller"), ("argoexec", f"{ARGO_MODULE}/cmd/argoexec")):
        t0 = time.monotonic()
        log(f"building {name}")
        subprocess.run([go, "build", "-trimpath", "-ldflags", _ldflags(), "-o", str(staging / name), package],
                       cwd=module, env=env, check=True)
        seconds[name] = round(time.monotonic() - t0, 1)
        log(f"  {name}: {seconds[name]:.0f}s")

    t0 = time.monotonic()
    tag = f"{IMAGE_REPOSITORY}/argoexec:{directory.name}"
    # emissary: the init container copies /bin/argoexec into a shared volume, the wait
    # container runs it; nothing else is needed in the image (a static binary, no shell).
    digest = images.write_image(staging / "images" / "argoexec.tar", tag,
                                [*images.base_dirs(), images.Entry("bin/argoexec", "file", (staging / "argoexec").read_bytes())],
                                entrypoint=["/bin/argoexec"])
    seconds["image"] = round(time.monotonic() - t0, 1)
    shutil.rmtree(module)
    info = {
        "argo": ARGO_VERSION,
        "go": cluster_build.go_version(),
        "executor_image": {"name": tag, "sha256": digest},
        "sizes": {name: (staging / name).stat().st_size for name in BINARIES},
        "build_seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
    }
    (staging / "versions.json").write_text(json.dumps(info, indent=2) + "\n")
    log(f"built Argo {ARGO_VERSION} (controller, argoexec, image) in {info['build_seconds']['total']}s: {directory}")
