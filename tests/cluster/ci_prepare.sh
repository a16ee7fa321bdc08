#!/usr/bin/env bash
# Prepare the local Kubernetes + Volcano + kwok control plane, the real test node and Argo's
# controller and executor (tests/argo/) for the integration tests. Idempotent: installs Go only when no `go` command exists, Debian
# packages only when missing, and builds the binaries only when the pins changed (they are
# cached in ~/.cache/volcano-pipelines/bin/<pin-hash>/, .../node/<pin-hash>/ and .../argo/<pin-hash>/).
# A cold build takes about the time recorded in tests/cluster/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE="${VPIPE_CACHE_DIR:-$HOME/.cache/volcano-pipelines}"
GO_TOOLCHAIN=go1.26.8   # keep in sync with GO_TOOLCHAIN in tests/cluster/build.py
export PATH="$PATH:/usr/local/go/bin:$CACHE/go/bin"

if ! command -v go >/dev/null 2>&1; then
    # The Go toolchain is published as a module on the Go module proxy; this is the same
    # archive `GOTOOLCHAIN=go1.26.8` downloads.
    echo "ci_prepare: installing $GO_TOOLCHAIN from the Go module proxy into $CACHE/go"
    mkdir -p "$CACHE"
    tmp="$(mktemp -d)"
    curl -fsSL -o "$tmp/go.zip" \
        "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_TOOLCHAIN.linux-amd64.zip"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$tmp/go.zip" "$tmp/x"
    rm -rf "$CACHE/go"
    mv "$tmp/x/golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64" "$CACHE/go"
    chmod +x "$CACHE"/go/bin/* "$CACHE"/go/pkg/tool/*/*
    rm -rf "$tmp"
fi
go version

# Debian packages: openssl (the launchers make certificates with it) and what the real
# test node runs (tests/node/): containerd, runc, the CNI plugins, busybox-static and gcc for
# its images, iproute2 for its bridge, nftables for the route pods take to the API server;
# podman and debootstrap build the images of images/.
PACKAGES="openssl containerd runc containernetworking-plugins podman debootstrap busybox-static gcc libc6-dev iproute2 nftables"
missing=""
for package in $PACKAGES; do
    if ! dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
        missing="$missing $package"
    fi
done
if [ -n "$missing" ]; then
    echo "ci_prepare: installing Debian packages:$missing"
    # scripts/test runs the prepare scripts side by side: they take turns at apt (one lock file).
    apt_lock="${TMPDIR:-/tmp}/vpipe-apt.lock"
    if ! { flock "$apt_lock" apt-get update -qq \
           && DEBIAN_FRONTEND=noninteractive flock "$apt_lock" apt-get install -y -qq $missing; }; then
        if [ "${CI:-}" = "true" ]; then
            echo "ci_prepare: cannot install$missing (CI=true: the real-node tests would fail)" >&2
            exit 1
        fi
        echo "ci_prepare: WARNING: cannot install$missing; the real-node tests will skip" >&2
    fi
fi

PYTHON="${PYTHON:-python3}"
if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi
# Argo's workflow-controller and argoexec (+ its image) from the pinned v4 module, beside the
# control plane and the node: a wrapper module of its own (only Go's module and build caches
# are shared, and Go locks those), ~1.9 GB of module downloads that overlap the other builds'
# compiling, and links that use one core each. Its output comes after theirs; a failed build
# fails this script, so CI never runs the Argo tests without them.
argo_log="$(mktemp "${TMPDIR:-/tmp}/vpipe-argo-build.XXXXXX")"
( time "$PYTHON" -c 'from tests.argo import build; build.build()' ) >"$argo_log" 2>&1 &
argo_build=$!
time "$PYTHON" -m tests.cluster build
if [ "$(id -u)" = 0 ] && [ -x /bin/busybox ] && command -v gcc >/dev/null 2>&1; then
    # kubelet, CoreDNS, the pause and busybox images (cached by pin hash like the above)
    time "$PYTHON" -m tests.cluster build --real-node
elif [ "${CI:-}" = "true" ]; then
    echo "ci_prepare: cannot build the real test node (needs root, busybox-static, gcc)" >&2
    wait "$argo_build" || true
    exit 1
fi
argo_rc=0
wait "$argo_build" || argo_rc=$?
echo "ci_prepare: Argo's build:"
cat "$argo_log"
rm -f "$argo_log"
[ "$argo_rc" = 0 ] || { echo "ci_prepare: building Argo failed (exit $argo_rc)" >&2; exit 1; }
# Everything built: a no-op that says so (and checks the cached Argo build is complete).
"$PYTHON" -m tests.cluster build --argo
