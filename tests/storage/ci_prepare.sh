#!/usr/bin/env bash
# Prepare the real storage systems the sync tests use (docs/sync.md, "Tests").
# Idempotent; starts nothing that outlives it (the pytest fixtures start HDFS / GlusterFS).
#   - GlusterFS: Debian's glusterfs-server + glusterfs-client (apt), if missing; strace
#     (the durability test traces a sync onto the volume).
#   - HDFS: Java + Maven (apt) if missing; resolve org.apache.hadoop:hadoop-minicluster from
#     Maven Central and compile the tiny MiniDFSCluster main into
#     ~/.cache/volcano-pipelines/minidfs/<key>/ (key = hash of pom.xml + the Java source),
#     reused while they do not change.
# What cannot be prepared is an error in CI (CI=true: exit 1, as the tests would fail
# anyway, tests/needs.py) and a warning elsewhere (the tests that need it then skip).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

in_ci() { case "${CI:-}" in [Tt][Rr][Uu][Ee]|1|[Yy][Ee][Ss]) return 0 ;; *) return 1 ;; esac; }
cannot() {  # cannot WHAT: stop in CI, warn elsewhere
  if in_ci; then
    echo "storage: cannot prepare: $1 (CI=true: failing)" >&2
    exit 1
  fi
  echo "storage: cannot prepare: $1; the tests that need it will skip" >&2
}
apt_install() {  # apt_install PKG...: as root with apt, quietly; updates the lists once if needed
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  export DEBIAN_FRONTEND=noninteractive
  # scripts/test runs the prepare scripts side by side: they take turns at apt (one lock file).
  local lock="${TMPDIR:-/tmp}/vpipe-apt.lock"
  flock "$lock" apt-get install -y -q "$@" >/dev/null 2>&1 || {
    flock "$lock" apt-get update -q >/dev/null && flock "$lock" apt-get install -y -q "$@" >/dev/null
  }
}

# ---------------------------------------------------------------- GlusterFS
if [ "${VPIPE_SKIP_GLUSTER:-0}" != 1 ]; then
  if ! command -v glusterd >/dev/null 2>&1 || ! command -v mount.glusterfs >/dev/null 2>&1; then
    echo "storage: installing glusterfs-server glusterfs-client (apt)"
    apt_install glusterfs-server glusterfs-client || true
  fi
  if ! command -v glusterd >/dev/null 2>&1 || ! command -v mount.glusterfs >/dev/null 2>&1; then
    cannot "GlusterFS (glusterd / mount.glusterfs missing and apt-get could not install them: needs root and apt)"
  elif [ ! -e /dev/fuse ]; then
    cannot "GlusterFS (/dev/fuse missing: the volume cannot be FUSE-mounted)"
  fi
  if ! command -v strace >/dev/null 2>&1; then
    echo "storage: installing strace (apt)"
    apt_install strace || true
    command -v strace >/dev/null 2>&1 || cannot "strace (the GlusterFS durability test traces a sync with it)"
  fi
fi

# ---------------------------------------------------------------- HDFS (MiniDFSCluster)
src_dir="$here/minidfs"
key="$(cat "$src_dir/pom.xml" "$src_dir/src/main/java/vpipe/MiniHdfs.java" | sha256sum | cut -c1-16)"
cache="${VPIPE_CACHE:-$HOME/.cache/volcano-pipelines}/minidfs/$key"
if [ -f "$cache/ready" ]; then
  echo "storage: MiniDFSCluster main cached at $cache"
  exit 0
fi
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  echo "storage: installing maven openjdk-17-jdk-headless (apt)"
  apt_install maven openjdk-17-jdk-headless || true
fi
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  cannot "HDFS (mvn / javac missing and apt-get could not install them)"
  exit 0
fi
echo "storage: resolving hadoop-minicluster with Maven and compiling MiniHdfs into $cache"
mkdir -p "$(dirname "$cache")"
tmp="$(mktemp -d "$cache.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mvn -B -q -f "$src_dir/pom.xml" dependency:build-classpath -Dmdep.outputFile="$tmp/classpath.txt" >"$tmp/mvn.log" 2>&1 || {
  tail -n 40 "$tmp/mvn.log" >&2
  exit 1
}
mkdir -p "$tmp/classes"
javac -nowarn -cp "$(cat "$tmp/classpath.txt")" -d "$tmp/classes" "$src_dir/src/main/java/vpipe/MiniHdfs.java"
cat >"$tmp/log4j.properties" <<'EOF'
log4j.rootLogger=WARN,stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
EOF
rm -rf "$cache"
mv "$tmp" "$cache"
trap - EXIT
touch "$cache/ready"
echo "storage: MiniDFSCluster main ready at $cache"
