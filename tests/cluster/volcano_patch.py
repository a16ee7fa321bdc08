"""Volcano's controller-manager with this repository's patch to its job controller, for the
scale benchmark (``benchmarks/cluster_scale_bench.py --volcano-controller patched``); the
tests run the stock build (tests/cluster/build.py).

The patch (``patches/volcano-v1.14.1-job-requests-without-pod.patch``, reviewable, small
enough to offer upstream): Volcano v1.14.1's job controller puts the pod's name and UID into
every request a pod event makes, so no two requests are equal, its work queue merges none,
and each is a full sync of the job: a job of 11,001 pods queues tens of thousands of syncs
(about 0.6 s each here) and its chief's ``TaskCompleted`` waits behind them (docs/scale.md).
Only two things read the pod of a request: a delayed action (a policy with a ``timeout``)
and the ``RestartPod`` / ``RestartPartition`` actions. The patch leaves the pod out of the
request when no policy of the job is one of those, so the requests of one task and event are
equal and merge while they wait.

Built from a patched copy of the module (removed after the build; nothing of Volcano's source
is kept in this repository) into
``~/.cache/volcano-pipelines/volcano-patched/<hash>/``; the hash covers the patch, this file,
the wrapper module and the Go version. ``python -m tests.cluster.volcano_patch`` builds it.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.cluster import build as cluster_build
from tests.helpers.build_cache import PinHash, cached_build

PATCH = Path(__file__).resolve().parent / "patches" / f"volcano-{cluster_build.VOLCANO_VERSION}-job-requests-without-pod.patch"
MODULE = "volcano.sh/volcano"
BINARY = "vc-controller-manager"
WRAPPER = cluster_build.GO_DIR / "volcano"


def directory() -> Path:
    key = PinHash()
    key.file(PATCH, PATCH.name)
    key.file(Path(__file__), "volcano_patch.py")
    for name in ("go.mod", "go.sum"):
        key.file(WRAPPER / name, name)
    key.data(cluster_build.go_version())
    return cluster_build.cache_root() / "volcano-patched" / key.key()


def build(force: bool = False, log: Callable[[str], None] = print) -> Path:
    """The patched controller-manager's path, built unless the cache has it."""
    target = directory()
    cached_build(target, lambda staging: _build_into(staging, log), contents=lambda d: (d / BINARY).exists(),
                 force=force, log=log, up_to_date="patched Volcano controller up to date")
    return target / BINARY


def _build_into(staging: Path, log: Callable[[str], None]) -> None:
    go, env = cluster_build.go_binary(), cluster_build.go_env()
    # A writable copy of the module with the patch applied, and a copy of the wrapper whose
    # go.mod replaces the module with it (the Go tool refuses overlays of the module cache).
    source = staging / "volcano"
    shutil.copytree(cluster_build.module_dir(MODULE, cluster_build.VOLCANO_VERSION), source)
    for path in [source, *source.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    # --forward: a patch that is already applied is an error, not a reversal.
    subprocess.run(["patch", "--forward", "--batch", "-p1", "-d", str(source), "-i", str(PATCH)], check=True)
    module = staging / "module"
    module.mkdir()
    for name in ("go.mod", "go.sum"):
        shutil.copyfile(WRAPPER / name, module / name)
    subprocess.run([go, "mod", "edit", f"-replace={MODULE}={source}"], cwd=module, env=env, check=True)
    ldflags = f"{cluster_build.COMMON_LDFLAGS} -X {MODULE}/pkg/version.Version={cluster_build.VOLCANO_VERSION}"
    log(f"building {BINARY} of {MODULE}@{cluster_build.VOLCANO_VERSION} with {PATCH.name}")
    subprocess.run([go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(staging / BINARY),
                    f"{MODULE}/cmd/controller-manager"], cwd=module, env=env, check=True)
    shutil.rmtree(module)
    shutil.rmtree(source)

if __name__ == "__main__":
    print(build(force="--force" in sys.argv[1:], log=lambda message: print(message, file=sys.stderr)))
