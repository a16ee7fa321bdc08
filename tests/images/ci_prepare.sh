#!/usr/bin/env bash
# Prepare the container images the `containers` tests run (tests/images/fixtures.py):
# podman, runc and debootstrap from Debian (apt, if missing), then images/build.py builds
# every image from images/ with a debootstrap-made Debian base, cached by content hash (a
# rebuild happens only when images/, the pins or, for the runtime image, the package changes).
# What cannot be prepared is an error in CI (CI=true) and a warning elsewhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
in_ci() { case "${CI:-}" in [Tt][Rr][Uu][Ee]|1|[Yy][Ee][Ss]) return 0 ;; *) return 1 ;; esac; }
cannot() {
  if in_ci; then echo "images: cannot prepare: $1 (CI=true: failing)" >&2; exit 1; fi
  echo "images: cannot prepare: $1; the tests that need it will skip" >&2
  exit 0
}
missing=()
for tool in podman runc debootstrap; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "images: installing podman runc debootstrap (apt)"
    export DEBIAN_FRONTEND=noninteractive
    # scripts/test runs the prepare scripts side by side: they take turns at apt (one lock file).
    lock="${TMPDIR:-/tmp}/vpipe-apt.lock"
    flock "$lock" apt-get install -y -q podman runc debootstrap >/dev/null 2>&1 || {
      flock "$lock" apt-get update -q >/dev/null && flock "$lock" apt-get install -y -q podman runc debootstrap >/dev/null
    } || cannot "apt-get could not install podman runc debootstrap"
  else
    cannot "${missing[*]} missing (needs root and apt)"
  fi
fi
PYTHON="${PYTHON:-python3}"
if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi
time "$PYTHON" -c 'from tests.images.fixtures import build_all; build_all(log=lambda m: print("images:", m, flush=True))'
