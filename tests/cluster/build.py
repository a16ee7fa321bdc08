"""Build the control-plane binaries from the pinned wrapper Go modules, cached by pin hash.

The binaries live outside the repository in ``~/.cache/volcano-pipelines/bin/<pin-hash>/``
(override the root with ``VPIPE_CACHE_DIR``). The hash covers every wrapper module's
go.mod/go.sum, the build settings below and the Go version, so a changed pin or toolchain
builds a fresh directory and an unchanged one is reused without running the Go tool.

Run it with ``python -m tests.cluster build``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.build_cache import PinHash, cached_build, is_complete

GO_DIR = Path(__file__).resolve().parent / "go"

# Versions the wrapper modules pin. They are repeated here only for the version ldflags
# and for messages; the go.mod files are what the Go tool uses.
KUBERNETES_VERSION = "v1.34.1"
VOLCANO_VERSION = "v1.14.1"
KWOK_VERSION = "v0.8.0"
ETCD_VERSION = "v3.6.16"
# The Go toolchain the binaries are built with. An older installed `go` (>= 1.21) fetches
# this exact version from the Go module proxy; a newer one switches down to it, so every
# machine builds the same thing.
GO_TOOLCHAIN = "go1.26.8"


@dataclass(frozen=True)
class Target:
    """One `go build` invocation: a wrapper module, its main packages and output names."""

    module_dir: str
    packages: dict[str, str]  # output binary name -> Go package path
    ldflags: str = ""


def _k8s_ldflags() -> str:
    # Without these the binaries report v0.0.0-master, which clients (and Volcano's own
    # version checks) treat as an unknown server version.
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = {
        "gitVersion": KUBERNETES_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "gitCommit": "0000000000000000000000000000000000000000",
        "buildDate": "1970-01-01T00:00:00Z",
    }
    parts = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        parts += [f"-X {pkg}.{key}={value}" for key, value in flags.items()]
    return " ".join(parts)


TARGETS: tuple[Target, ...] = (
    Target("etcd", {"etcd": "."}),
    Target("kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"}),
    Target(
        "k8s",
        {
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        },
        _k8s_ldflags(),
    ),
    Target(
        "volcano",
        {
            "vc-controller-manager": "volcano.sh/volcano/cmd/controller-manager",
            "vc-scheduler": "volcano.sh/volcano/cmd/scheduler",
            # Volcano's job admission webhooks run in process (tests/integration/test_job_admission.py).
            "vc-webhook-check": "./webhookcheck",
        },
        f"-X volcano.sh/volcano/pkg/version.Version={VOLCANO_VERSION}",
    ),
)

BINARIES: tuple[str, ...] = tuple(name for t in TARGETS for name in t.packages)
COMMON_LDFLAGS = "-s -w"  # no symbol tables: smaller binaries, faster link


def cache_root() -> Path:
    return Path(os.environ.get("VPIPE_CACHE_DIR", Path.home() / ".cache" / "volcano-pipelines"))


def go_binary() -> str:
    """The `go` command: on PATH, in /usr/local/go, or the toolchain ci_prepare.sh unpacked."""
    candidates = [shutil.which("go"), "/usr/local/go/bin/go", str(cache_root() / "go" / "bin" / "go")]
    for go in candidates:
        if go and Path(go).exists():
            return go
    raise RuntimeError("the Go toolchain is not installed (run tests/cluster/ci_prepare.sh)")


def go_available() -> bool:
    try:
        go_binary()
        return True
    except RuntimeError:
        return False


def go_version() -> str:
    return subprocess.run(
        [go_binary(), "env", "GOVERSION"], check=True, capture_output=True, text=True, env=go_env()
    ).stdout.strip()


def pin_hash() -> str:
    """Hash of everything that decides what the binaries are."""
    key = PinHash()
    for target in TARGETS:
        module = GO_DIR / target.module_dir
        for path in sorted([module / "go.mod", module / "go.sum", *module.rglob("*.go")]):
            if path.exists():
                key.file(path, str(path.relative_to(GO_DIR)))
        key.data(json.dumps([target.packages, target.ldflags]))
    key.data(COMMON_LDFLAGS)
    key.data(go_version())
    return key.key()


def bin_dir() -> Path:
    return cache_root() / "bin" / pin_hash()


def _has_binaries(directory: Path) -> bool:
    return all((directory / name).exists() for name in BINARIES)


def is_built(directory: Path | None = None) -> bool:
    return is_complete(directory or bin_dir(), _has_binaries)


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    # A build cache of our own keeps cold/warm behaviour independent of other Go work on
    # the machine and lets CI cache exactly this directory.
    env.setdefault("GOCACHE", str(cache_root() / "go-build"))
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = "-buildvcs=false"
    env.setdefault("GOTOOLCHAIN", GO_TOOLCHAIN)
    return env


def build(force: bool = False, log=print) -> Path:
    """Build all binaries into the pin-hash directory unless they are already there (one build
    at a time per cache, staged and renamed into place: tests/helpers/build_cache.py)."""
    directory = bin_dir()
    return cached_build(directory, lambda staging: _build_into(staging, directory, log), contents=_has_binaries,
                        force=force, log=log, up_to_date="control-plane binaries up to date")


def _build_into(staging: Path, directory: Path, log) -> None:
    env = go_env()
    started = time.monotonic()
    for target in TARGETS:
        t0 = time.monotonic()
        for name, package in target.packages.items():
            ldflags = f"{COMMON_LDFLAGS} {target.ldflags}".strip()
            cmd = [go_binary(), "build", "-trimpath", "-ldflags", ldflags, "-o", str(staging / name), package]
            log(f"building {name} ({target.module_dir})")
            subprocess.run(cmd, cwd=GO_DIR / target.module_dir, env=env, check=True)
        log(f"  {target.module_dir}: {time.monotonic() - t0:.0f}s")
    info = {
        "kubernetes": KUBERNETES_VERSION,
        "volcano": VOLCANO_VERSION,
        "kwok": KWOK_VERSION,
        "etcd": ETCD_VERSION,
        "go": go_version(),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    (staging / "versions.json").write_text(json.dumps(info, indent=2) + "\n")
    log(f"built control-plane binaries in {info['build_seconds']}s: {directory}")


def module_dir(module: str, version: str) -> Path:
    """Directory of a module in the Go module cache, downloading it if needed."""
    out = subprocess.run(
        [go_binary(), "mod", "download", "-json", f"{module}@{version}"],
        check=True,
        capture_output=True,
        text=True,
        env=go_env(),
        cwd=GO_DIR / "volcano",
    ).stdout
    return Path(json.loads(out)["Dir"])


def volcano_crd_dir() -> Path:
    """Volcano's CRDs from the module cache (never copied into this repository)."""
    return module_dir("volcano.sh/volcano", VOLCANO_VERSION) / "config" / "crd" / "volcano" / "bases"


if __name__ == "__main__":
    build(force="--force" in sys.argv)
