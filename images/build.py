"""Build the project's container images from images/<name>/Dockerfile, cached by content hash.

    python -m images.build [NAME...] [--engine podman|docker] [--base pull|debootstrap]
                           [--save DIR] [--force] [--hdfs-native patched|stock]

Every image is tagged `volcano-pipelines/<name>:<package version>` (the names live in
`volcano_pipelines.images`) and labelled with the hash of everything that decides it: its
Dockerfile directory, the wheels it installs, the base image and, for the runtime image, the
package source. An image whose label already matches is not built again.

Python packages enter the build as wheels made on the host (`pip wheel`, pinned by each
image's requirements.txt) in the build context's wheels/: the Dockerfiles never reach a
package index, so a build is the same on a laptop, in CI and on a machine whose containers
have no route to PyPI. Debian packages come from Debian's mirror in `RUN apt-get` steps.

The base image (`BASE_IMAGE` in the Dockerfiles, a pinned Debian point release) is pulled,
or with `--base debootstrap` made here: `debootstrap --variant=minbase` of the same Debian
release, imported under the name the Dockerfiles use. That is how the tests build where no
registry can be reached; the file system is Debian's own packages either way.

The runtime image (the step pods, the copy pods) gets the patched hdfs-native of
images/hdfs-native/ (built from the pinned sdist with cargo, cached by content hash: minutes on
a cold cache) in place of PyPI's wheel; `--hdfs-native stock` keeps PyPI's (docs/sync.md).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

IMAGES_DIR = Path(__file__).resolve().parent
ROOT = IMAGES_DIR.parent
sys.path.insert(0, str(ROOT / "src"))  # the image names and version, without installing

from volcano_pipelines import __version__  # noqa: E402
from volcano_pipelines.images import IMAGES as PRODUCT_IMAGES, REPOSITORY_PREFIX  # noqa: E402

# Test-only images: stand-ins for what cannot be had where the tests run (no registry, no
# TF Serving binary). Built like the product's images; never named by the package.
STAND_INS = {"tfserving-standin": f"{REPOSITORY_PREFIX}/tfserving-standin:{__version__}"}
IMAGES = {**PRODUCT_IMAGES, **STAND_INS}  # images/<name>/Dockerfile -> tag

# The Dockerfiles' default BASE_IMAGE: Debian 12 at a pinned point release. Python in it is
# 3.11, the version the host's wheels are resolved for (checked before building).
DEBIAN_SUITE = "bookworm"
DEBIAN_POINT_RELEASE = "12.15"
BASE_IMAGE = f"docker.io/library/debian:{DEBIAN_POINT_RELEASE}-slim"
DEBIAN_MIRROR = os.environ.get("VPIPE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
IMAGE_PYTHON = (3, 11)
HASH_LABEL = "dev.volcano-pipelines.content-hash"

Log = Callable[[str], None]


def cache_dir() -> Path:
    root = Path(os.environ.get("VPIPE_CACHE_DIR", Path.home() / ".cache" / "volcano-pipelines"))
    return root / "images"


def _stderr(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Engine:
    """podman or docker. On this kind of machine podman builds with `--isolation chroot` (RUN
    under runc isolation fails), runs with runc (crun fails on the cgroup v1/v2 hybrid) and
    with explicit rlimits: podman's defaults, and even `--ulimit host`, ask runc for limits
    the container's init may not set here (seen: nproc 65536 refused, 32768 allowed)."""

    command: str = "podman"

    def build_args(self) -> list[str]:
        return ["--isolation", "chroot"] if self.command == "podman" else []

    def run_args(self) -> list[str]:
        if self.command != "podman":
            return []
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
        return ["--runtime", "runc", "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]

    def __call__(self, *args: str, capture: bool = False, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.command, *args], check=check, text=True, capture_output=capture)

    def label(self, image: str, label: str) -> str | None:
        found = self("image", "inspect", "--format", "{{json .Config.Labels}}", image, capture=True, check=False)
        if found.returncode != 0:
            return None
        labels = json.loads(found.stdout.strip() or "null") or {}
        return labels.get(label)

    def exists(self, image: str) -> bool:
        return self("image", "inspect", "--format", "{{.Id}}", image, capture=True, check=False).returncode == 0

    def image_id(self, image: str) -> str:
        return self("image", "inspect", "--format", "{{.Id}}", image, capture=True).stdout.strip()


def _hash_files(digest: hashlib._Hash, paths: Iterable[Path], root: Path) -> None:
    for path in sorted(paths):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(f"{path.relative_to(root)}\0{path.stat().st_mode & 0o111}\0".encode())
            digest.update(path.read_bytes())


# ---------------------------------------------------------------- base image


def ensure_base(engine: Engine, how: str, log: Log = _stderr) -> str:
    """The image id of BASE_IMAGE, pulled or made with debootstrap when missing."""
    if engine.exists(BASE_IMAGE):
        return engine.image_id(BASE_IMAGE)
    if how == "pull":
        log(f"pulling {BASE_IMAGE}")
        engine("pull", BASE_IMAGE)
        return engine.image_id(BASE_IMAGE)
    if not shutil.which("debootstrap"):
        raise SystemExit("images: --base debootstrap needs debootstrap (apt-get install debootstrap)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vpipe-rootfs-", dir=_work_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        log(f"making {BASE_IMAGE} with debootstrap ({DEBIAN_SUITE} from {DEBIAN_MIRROR})")
        subprocess.run(
            ["debootstrap", "--variant=minbase", DEBIAN_SUITE, str(rootfs), DEBIAN_MIRROR],
            check=True, stdout=subprocess.DEVNULL,
        )
        release = (rootfs / "etc" / "debian_version").read_text().strip()
        if release != DEBIAN_POINT_RELEASE:
            # Debian's mirror serves the newest point release only: say so rather than
            # pretend; the pin in the Dockerfiles is what a registry build uses.
            log(f"note: the mirror's {DEBIAN_SUITE} is {release}; importing it as {BASE_IMAGE}")
        # Like the registry's slim images: no apt lists, docs or caches in the base.
        for sub in ("var/lib/apt/lists", "var/cache/apt/archives", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / sub, ignore_errors=True)
            (rootfs / sub).mkdir(parents=True, exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            [engine.command, "import", "--change", 'CMD ["bash"]', "-", BASE_IMAGE],
            stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL,
        )
        if tar.wait() != 0:
            raise SystemExit("images: tar of the debootstrap root file system failed")
    log(f"made {BASE_IMAGE} in {time.monotonic() - started:.0f} s")
    return engine.image_id(BASE_IMAGE)


def _drop_older(paths: Iterable[Path], keep: Path) -> None:
    """The runtime image changes with every change of the package: keep one wheel set and one
    archive per image, not one per commit."""
    for path in paths:
        if path != keep and not path.name.endswith(".partial"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def _work_dir() -> Path:
    # Build contexts and root file systems next to the wheel cache: hard links, no copies.
    path = cache_dir() / "work"
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---------------------------------------------------------------- wheels


def _check_python() -> None:
    if sys.version_info[:2] != IMAGE_PYTHON:
        raise SystemExit(
            f"images: the wheels are resolved for the images' Python {'.'.join(map(str, IMAGE_PYTHON))}; "
            f"run this with that Python (this is {sys.version.split()[0]})"
        )


HDFS_NATIVE_CHOICES = ("patched", "stock")


def patched_hdfs_native() -> object:
    """images/hdfs-native/build.py as a module (its folder name is not a package name)."""
    spec = importlib.util.spec_from_file_location("hdfs_native_build", IMAGES_DIR / "hdfs-native" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheels(name: str, log: Log = _stderr, hdfs_native: str = "stock") -> Path:
    """A directory of wheels satisfying images/<name>/requirements.txt (none if it has none),
    cached by the requirements, pyproject.toml (the runtime's dependencies) and pip's version.
    hdfs_native="patched": the runtime's hdfs-native is images/hdfs-native/'s wheel."""
    requirements = IMAGES_DIR / name / "requirements.txt"
    if not requirements.exists():
        return Path()
    _check_python()
    project_wheel = name == "runtime"
    digest = hashlib.sha256(requirements.read_bytes())
    if project_wheel:
        digest.update((ROOT / "pyproject.toml").read_bytes())
        _hash_files(digest, (ROOT / "src" / "volcano_pipelines").rglob("*.py"), ROOT)
    pip_version = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=True).stdout
    digest.update(pip_version.split(" from ")[0].encode())
    patched: Path | None = None
    if project_wheel and hdfs_native == "patched":
        patched = patched_hdfs_native().wheel(log=log)  # type: ignore[attr-defined]
        digest.update(f"{patched.parent.name}/{patched.name}".encode())  # its content key and name
    target = cache_dir() / "wheels" / f"{name}-{digest.hexdigest()[:16]}"
    if (target / ".complete").exists():
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.monotonic()
    specs = ["-r", str(requirements)]
    if project_wheel:
        log("building the volcano-pipelines wheel")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(staging), str(ROOT)], check=True)
        own = next(staging.glob("volcano_pipelines-*.whl"))
        specs = [f"{own}[sync,kfp]"]
    log(f"resolving wheels for {name}")
    # `pip wheel` takes published wheels as they are and builds the few sdists (kfp's) here.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(staging), *specs], check=True)
    if patched is not None:
        for stock in staging.glob("hdfs_native-*.whl"):
            stock.unlink()
        shutil.copy2(patched, staging / patched.name)
    (staging / ".complete").write_text("")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    _drop_older(target.parent.glob(f"{name}-*"), keep=target)
    log(f"wheels for {name}: {len(list(target.glob('*.whl')))} in {time.monotonic() - started:.0f} s")
    return target


# ---------------------------------------------------------------- images


def content_hash(name: str, wheel_dir: Path, base_id: str) -> str:
    digest = hashlib.sha256(f"{name}\0{base_id}\0".encode())
    _hash_files(digest, (IMAGES_DIR / name).rglob("*"), IMAGES_DIR)
    # Wheel file names carry name, version and tags; our own wheel is covered by the source
    # hash in the wheel directory's name (wheel archives are not byte-reproducible).
    digest.update(wheel_dir.name.encode())
    digest.update("\n".join(sorted(p.name for p in wheel_dir.glob("*.whl"))).encode() if wheel_dir.name else b"")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Built:
    name: str
    tag: str
    content_hash: str
    built: bool  # False: the tagged image already had this hash
    seconds: float
    archive: Path | None = None


def build_image(name: str, engine: Engine, base_id: str, force: bool = False, log: Log = _stderr,
                hdfs_native: str = "stock") -> Built:
    tag = IMAGES[name]
    started = time.monotonic()
    wheel_dir = wheels(name, log, hdfs_native)
    key = content_hash(name, wheel_dir, base_id)
    if not force and engine.label(tag, HASH_LABEL) == key:
        return Built(name, tag, key, built=False, seconds=time.monotonic() - started)
    log(f"building {tag} ({key})")
    with tempfile.TemporaryDirectory(prefix=f"ctx-{name}-", dir=_work_dir()) as tmp:
        context = Path(tmp)
        shutil.copytree(IMAGES_DIR / name, context, dirs_exist_ok=True)
        (context / "wheels").mkdir(exist_ok=True)
        for wheel in wheel_dir.glob("*.whl") if wheel_dir.name else ():
            os.link(wheel, context / "wheels" / wheel.name)
        engine(
            "build", *engine.build_args(), "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
            "--label", f"{HASH_LABEL}={key}", "--label", f"org.opencontainers.image.version={__version__}",
            "-t", tag, str(context),
        )
    seconds = time.monotonic() - started
    log(f"built {tag} in {seconds:.0f} s")
    return Built(name, tag, key, built=True, seconds=seconds)


def save(built: Built, engine: Engine, directory: Path) -> Built:
    """A docker-archive of the image (what `ctr images import` and `docker load` take),
    named by its content hash and kept while that does not change. The archive names the
    image as a kubelet spells `volcano-pipelines/runtime:0.1.0` (docker.io/...), where
    podman would write localhost/...: a pod naming the short tag then finds it."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / f"{built.name}-{built.content_hash}.tar"
    if not archive.exists():
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        canonical = f"docker.io/{built.tag}"
        engine("tag", built.tag, canonical)
        engine("save", "--format", "docker-archive", "-o", str(partial), canonical, capture=True)
        partial.rename(archive)
        _drop_older(directory.glob(f"{built.name}-*.tar"), keep=archive)
    return Built(built.name, built.tag, built.content_hash, built.built, built.seconds, archive)


def build(
    names: Sequence[str] = (),
    engine: Engine = Engine(),
    base: str = "pull",
    save_dir: Path | None = None,
    force: bool = False,
    log: Log = _stderr,
    hdfs_native: str = "patched",
) -> dict[str, Built]:
    """Build (or find) the named images, all of them by default. One build at a time per
    cache: CI's prepare step and a test session may overlap."""
    unknown = [n for n in names if n not in IMAGES]
    if unknown:
        raise SystemExit(f"images: unknown image {unknown[0]!r}; choose from {', '.join(IMAGES)}")
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        base_id = ensure_base(engine, base, log)
        results = {}
        for name in names or tuple(IMAGES):
            built = build_image(name, engine, base_id, force, log, hdfs_native)
            if save_dir is not None:
                built = save(built, engine, save_dir)
            results[name] = built
        _remove_replaced(engine)
        return results


def _remove_replaced(engine: Engine) -> None:
    """Images of ours that a rebuild left without a tag: the runtime image is rebuilt with
    every change of the package, and a machine that runs CI daily must not fill its disk."""
    found = engine("images", "-q", "--filter", "dangling=true", "--filter", f"label={HASH_LABEL}",
                   capture=True, check=False)
    for image_id in sorted(set(found.stdout.split())):
        engine("rmi", image_id, capture=True, check=False)  # still used by a container: kept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m images.build", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"images to build (default: all of {', '.join(IMAGES)})")
    parser.add_argument("--engine", choices=("podman", "docker"), default="podman")
    parser.add_argument("--base", choices=("pull", "debootstrap"), default="pull",
                        help=f"how to get {BASE_IMAGE} when it is missing (default: pull)")
    parser.add_argument("--save", type=Path, metavar="DIR", help="also write docker-archive tarballs there")
    parser.add_argument("--force", action="store_true", help="build even when the content hash matches")
    parser.add_argument("--hdfs-native", choices=HDFS_NATIVE_CHOICES, default="patched",
                        help="the runtime image's hdfs-native: images/hdfs-native/'s patched wheel (default; needs cargo "
                             "on a cold cache) or PyPI's")
    args = parser.parse_args(argv)
    results = build(args.names, Engine(args.engine), args.base, args.save, args.force, hdfs_native=args.hdfs_native)
    for built in results.values():
        state = f"built in {built.seconds:.0f} s" if built.built else "up to date"
        print(f"{built.tag:48} {built.content_hash}  {state}" + (f"  {built.archive}" if built.archive else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
