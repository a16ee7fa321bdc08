#!/usr/bin/env bash
# Prepare the real storage systems the sync tests use (TESTING.md sections 2-3).
# Idempotent; starts nothing that outlives it (the pytest fixtures start HDFS / GlusterFS).
#   - GlusterFS: Debian's glusterfs-server + glusterfs-client (apt), if missing.
#   - HDFS: resolve org.apache.hadoop:hadoop-minicluster from Maven Central and compile the
#     tiny MiniDFSCluster main into ~/.cache/volcano-pipelines/minidfs/<key>/ (key = hash of
#     pom.xml + the Java source), reused while they do not change.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---------------------------------------------------------------- GlusterFS
if [ "${VPIPE_SKIP_GLUSTER:-0}" != 1 ]; then
  if ! command -v glusterd >/dev/null 2>&1 || ! command -v mount.glusterfs >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "storage: installing glusterfs-server glusterfs-client (apt)"
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -q glusterfs-server glusterfs-client >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        apt-get install -y -q glusterfs-server glusterfs-client >/dev/null
      }
    else
      echo "storage: glusterfs not installed and cannot apt-get install it (not root or no apt); GlusterFS tests will skip" >&2
    fi
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
  echo "storage: mvn/javac not found; HDFS tests will skip" >&2
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
