#!/usr/bin/env python3
"""Build the patched hdfs-native wheel: the pinned sdist from PyPI, this folder's patch, maturin.

    python images/hdfs-native/build.py [--force] [--site]

Prints the wheel's path (with --site also the directory it is unpacked in, for PYTHONPATH).

The sdist (hdfs-native VERSION, checked against SDIST_SHA256) carries the whole Rust source;
`hdfs-native-VERSION.patch` changes four things on the read path (docs/sync.md): CRC32C
checked through the `crc32c` crate (the CPU's instruction, three chunks at once on x86-64, its
software table elsewhere; verification stays on), packet buffers no longer zero-filled before
the socket fills them, `readinto` on the binding's range stream and file reader (the GIL
released, the caller's buffer filled, no Python `bytes`), and `write_to` on the range stream
(its packets pwritten into a file descriptor from hdfs-native's own buffers). The wheel's version is VERSION+vpipe.N, so `pip list` and
`hdfs_native`'s metadata say which one is installed.

The result is cached under ~/.cache/volcano-pipelines/hdfs-native/ (or $VPIPE_CACHE_DIR) by
a content hash of the sdist's sha256, the patch, this script, maturin's pin and rustc's
version: built once, rebuilt only when one of those changes. A cold build compiles about 250
crates (minutes on two cores: docs/sync.md has the measured time); the Rust toolchain
(cargo, rustc) must be on PATH or in ~/.cargo/bin, and crates.io and PyPI reachable.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSION = "0.14.7"
SDIST = f"hdfs_native-{VERSION}.tar.gz"
SDIST_SHA256 = "b17422786c935bdec05f7f1fefa796ee146e047cbd47723607b2d4f892879331"
PATCH = HERE / f"hdfs-native-{VERSION}.patch"
BUILT_VERSION = f"{VERSION}+vpipe.2"  # set by the patch (python/Cargo.toml)
# The maturin the sdist's own lock file uses (python/uv.lock).
MATURIN = "maturin==1.13.3"

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"hdfs-native: {message}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    root = Path(os.environ.get("VPIPE_CACHE_DIR", Path.home() / ".cache" / "volcano-pipelines"))
    return root / "hdfs-native"


def _cargo_env() -> dict[str, str]:
    env = dict(os.environ)
    cargo_bin = Path.home() / ".cargo" / "bin"
    if shutil.which("cargo") is None and (cargo_bin / "cargo").exists():
        env["PATH"] = f"{cargo_bin}{os.pathsep}{env.get('PATH', '')}"
    if shutil.which("cargo", path=env.get("PATH")) is None:
        raise SystemExit("hdfs-native: building the patched wheel needs the Rust toolchain (cargo, rustc): not found")
    return env


def content_key() -> str:
    """What decides the wheel: the sdist, the patch, this recipe, maturin and rustc."""
    digest = hashlib.sha256(f"{SDIST_SHA256}\0{MATURIN}\0".encode())
    digest.update(PATCH.read_bytes())
    digest.update(Path(__file__).read_bytes())
    rustc = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, env=_cargo_env(), check=True).stdout
    digest.update(rustc.encode())
    return digest.hexdigest()[:16]


def _target(key: str) -> Path:
    return cache_root() / f"{VERSION}-{key}"


def cached_wheel() -> Path | None:
    """The wheel built for the current content key, or None (nothing is built)."""
    target = _target(content_key())
    if not (target / ".complete").exists():
        return None
    return next(target.glob("*.whl"), None)


def _sdist(log: Log) -> Path:
    path = cache_root() / "sdist" / SDIST
    if path.exists() and _sha256(path) == SDIST_SHA256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        log(f"downloading {SDIST} (PyPI)")
        # The sdist only: `:all:` would also build pip's metadata backend (maturin) from source.
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "hdfs-native",
                        "-d", tmp, f"hdfs-native=={VERSION}"], check=True)
        got = Path(tmp) / SDIST
        if _sha256(got) != SDIST_SHA256:
            raise SystemExit(f"hdfs-native: {SDIST} has sha256 {_sha256(got)}, not the pinned {SDIST_SHA256}")
        got.replace(path)
    return path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _maturin(log: Log) -> Path:
    venv = cache_root() / MATURIN.replace("==", "-")
    exe = venv / "bin" / "maturin"
    if exe.exists():
        return exe
    log(f"installing {MATURIN} (PyPI)")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", MATURIN], check=True)
    return exe


def wheel(force: bool = False, log: Log = _stderr) -> Path:
    """The patched wheel, built when the cache has none for the current content key."""
    key = content_key()
    target = _target(key)
    if not force and (target / ".complete").exists():
        return next(target.glob("*.whl"))
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (the image build and a benchmark may overlap)
        if not force and (target / ".complete").exists():
            return next(target.glob("*.whl"))
        sdist, maturin = _sdist(log), _maturin(log)
        started = time.monotonic()
        work = cache_root() / "work"
        work.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="build-", dir=work) as tmp:
            subprocess.run(["tar", "-xzf", str(sdist), "-C", tmp], check=True)
            source = Path(tmp) / f"hdfs_native-{VERSION}"
            subprocess.run(["patch", "-p1", "--batch", "--forward", "--quiet", "-i", str(PATCH)], cwd=source, check=True)
            staging = target.with_name(target.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            env = _cargo_env() | {"CARGO_TARGET_DIR": str(Path(tmp) / "target")}
            log(f"building hdfs-native {BUILT_VERSION} (cargo, release; minutes on two cores)")
            # --locked: the dependency versions of the sdist's Cargo.lock (and the patch's one addition).
            subprocess.run([str(maturin), "build", "--release", "--locked", "--out", str(staging),
                            "--interpreter", sys.executable], cwd=source, env=env, check=True,
                           stdout=subprocess.DEVNULL)
        seconds = time.monotonic() - started
        built = list(staging.glob("*.whl"))
        if len(built) != 1:
            raise SystemExit(f"hdfs-native: expected one wheel from maturin, found {[p.name for p in built]}")
        (staging / ".complete").write_text(f"{seconds:.0f} s to build\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        for old in cache_root().glob(f"{VERSION}-*"):  # one patched build kept, not one per patch revision
            if old != target and not old.name.endswith(".partial"):
                shutil.rmtree(old, ignore_errors=True)
        log(f"built {built[0].name} in {seconds:.0f} s")
        return target / built[0].name


def site(wheel_path: Path) -> Path:
    """The wheel unpacked into a directory of its own: put it first on PYTHONPATH to run the
    copier with the patched binding while the environment keeps the stock one."""
    out = wheel_path.parent / "site"
    if not (out / ".complete").exists():
        shutil.rmtree(out, ignore_errors=True)
        with zipfile.ZipFile(wheel_path) as archive:
            archive.extractall(out)
        (out / ".complete").write_text("")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="build even when the cache holds this content's wheel")
    parser.add_argument("--site", action="store_true", help="also unpack it and print that directory")
    args = parser.parse_args(argv)
    path = wheel(force=args.force)
    print(path)
    if args.site:
        print(site(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
