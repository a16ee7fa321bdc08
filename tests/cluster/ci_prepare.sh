#!/usr/bin/env bash
# Prepare the local Kubernetes + Volcano + kwok control plane for the integration tests.
# Idempotent: installs Go only when no `go` command exists, and builds the binaries only
# when the pins changed (they are cached in ~/.cache/volcano-pipelines/bin/<pin-hash>/).
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

if ! command -v openssl >/dev/null 2>&1; then
    # The launcher makes the apiserver's certificates with the openssl command.
    apt-get install -y openssl
fi

PYTHON="${PYTHON:-python3}"
if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi
time "$PYTHON" -m tests.cluster build
