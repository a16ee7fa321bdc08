"""Real storage for tests and benchmarks: a MiniDFSCluster (HDFS with WebHDFS) and
GlusterFS volumes FUSE-mounted on this machine (docs/sync.md, "Tests").

Used by tests/storage/fixtures.py (pytest fixtures) and benchmarks/sync_bench.py."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from volcano_pipelines.localjob.ports import free_port

HERE = Path(__file__).resolve().parent
CACHE_ROOT = Path(os.environ.get("VPIPE_CACHE", Path.home() / ".cache" / "volcano-pipelines"))

# Options every test / benchmark volume gets; the benchmark prints them.
GLUSTER_OPTIONS: dict[str, str] = {
    "performance.client-io-threads": "on",
    "performance.nl-cache": "on",
    "performance.md-cache-timeout": "60",
    "performance.stat-prefetch": "on",
    "performance.cache-invalidation": "on",
    "features.cache-invalidation": "on",
    "performance.parallel-readdir": "on",
    "performance.readdir-ahead": "on",
}


JAVA_OPENS = ("java.lang", "java.lang.reflect", "java.util", "java.util.concurrent", "java.io", "java.net", "java.nio", "sun.nio.ch")


class Unavailable(Exception):
    """The system cannot be had on this machine (the message says why, in one line)."""


# ---------------------------------------------------------------------------- HDFS


def minidfs_dir() -> Path:
    src = HERE / "minidfs"
    data = (src / "pom.xml").read_bytes() + (src / "src/main/java/vpipe/MiniHdfs.java").read_bytes()
    return CACHE_ROOT / "minidfs" / hashlib.sha256(data).hexdigest()[:16]


def ensure_minidfs_built() -> Path:
    built = minidfs_dir()
    if (built / "ready").exists():
        return built
    if not shutil.which("java") or not shutil.which("mvn"):
        raise Unavailable("HDFS: java/mvn not installed (needed for MiniDFSCluster)")
    env = dict(os.environ, VPIPE_SKIP_GLUSTER="1")
    proc = subprocess.run(["bash", str(HERE / "ci_prepare.sh")], env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not (built / "ready").exists():
        raise RuntimeError(f"building MiniDFSCluster failed:\n{proc.stdout}\n{proc.stderr}")
    return built


@dataclass
class MiniHdfs:
    """A running MiniDFSCluster. `rpc` is host:port of the NameNode."""

    base: Path
    rpc_port: int
    http_port: int
    ha_ports: tuple[int, int] | None = None  # (rpc, http) of nn2: an HA name service "ns1"
    # The DataNode's name in WebHDFS redirects, for clients that are not on this host (pods):
    # then the NameNode's HTTP server and the DataNode listen on all addresses.
    datanode_hostname: str | None = None
    proc: subprocess.Popen[str] | None = None
    conf_dir: Path = field(init=False)
    _lines: list[str] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        self.conf_dir = self.base / "conf"

    @property
    def rpc(self) -> str:
        return f"127.0.0.1:{self.rpc_port}"

    @property
    def url(self) -> str:
        return "hdfs://ns1" if self.ha_ports else f"hdfs://{self.rpc}"

    @property
    def webhdfs_url(self) -> str:
        return f"webhdfs://127.0.0.1:{self.http_port}"

    @property
    def core_site(self) -> Path:
        return self.conf_dir / "core-site.xml"

    def start(self, timeout: float = 240.0) -> None:
        built = ensure_minidfs_built()
        classpath = f"{built / 'classes'}:{(built / 'classpath.txt').read_text().strip()}"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        log4j = self.base / "log4j.properties"
        # WARN and up, plus the NameNode audit log (tests check which user did what).
        log4j.write_text((built / "log4j.properties").read_text() + "log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=INFO\n")
        log = open(self.base / "minidfs.log", "w")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [
                "java",
                "-Xmx1g",
                # Java 17: Jersey/JAXB behind WebHDFS reflect into java.base (as Hadoop's own scripts allow).
                *(f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in JAVA_OPENS),
                f"-Dlog4j.configuration=file:{log4j}",
                *([f"-Dvpipe.datanode.hostname={self.datanode_hostname}"] if self.datanode_hostname else []),
                "-cp",
                classpath,
                "vpipe.MiniHdfs",
                str(self.base / "data"),
                str(self.rpc_port),
                str(self.http_port),
                str(self.core_site),
                *(["ha", str(self.ha_ports[0]), str(self.ha_ports[1])] if self.ha_ports else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._reader, daemon=True).start()
        self._wait_for(lambda line: line.startswith("READY"), timeout, "MiniDFSCluster start")

    def _reader(self) -> None:
        assert self.proc and self.proc.stdout
        for line in self.proc.stdout:
            with self._cond:
                self._lines.append(line.strip())
                self._cond.notify_all()
        with self._cond:
            self._lines.append("EOF")
            self._cond.notify_all()

    def _wait_for(self, pred, timeout: float, what: str, since: int = 0) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self._lines[since:]:
                    if pred(line):
                        return
                    if line == "EOF" or line.startswith("ERR"):
                        raise RuntimeError(f"{what} failed: {line}; see {self.base / 'minidfs.log'}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what} timed out; see {self.base / 'minidfs.log'}")
                self._cond.wait(left)

    def _command(self, cmd: str, timeout: float = 120.0) -> None:
        assert self.proc and self.proc.stdin
        with self._cond:
            since = len(self._lines)
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        self._wait_for(lambda line: line == f"OK {cmd}", timeout, cmd, since)

    def failover(self) -> None:
        """HA only: nn1 becomes standby, nn2 active."""
        self._command("failover")

    def stop_namenode(self) -> None:
        self._command("stop-nn")

    def start_namenode(self) -> None:
        self._command("start-nn")

    def audit_log(self) -> str:
        return (self.base / "minidfs.log").read_text(errors="replace")

    def client(self):  # type: ignore[no-untyped-def]
        from hdfs_native import Client

        return Client(self.url, config_dir=str(self.conf_dir)) if self.ha_ports else Client(self.url)

    def stop(self) -> None:
        if not self.proc:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def start_hdfs(base: Path | None = None, *, ha: bool = False, datanode_hostname: str | None = None) -> MiniHdfs:
    base = base or Path(tempfile.mkdtemp(prefix="vpipe-hdfs-"))
    ha_ports = (free_port(), free_port()) if ha else None
    cluster = MiniHdfs(base=base, rpc_port=free_port(), http_port=free_port(), ha_ports=ha_ports,
                       datanode_hostname=datanode_hostname)
    cluster.start()
    return cluster


# ---------------------------------------------------------------------------- GlusterFS


def _run(*cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stdout.strip()} {proc.stderr.strip()}")
    return proc


def gluster_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "GlusterFS: needs root (glusterd, FUSE mount)"
    for tool in ("glusterd", "gluster", "mount.glusterfs"):
        if not shutil.which(tool):
            return f"GlusterFS: {tool} not installed (run tests/storage/ci_prepare.sh)"
    if not os.path.exists("/dev/fuse"):
        return "GlusterFS: /dev/fuse missing"
    return None


@dataclass
class GlusterVolume:
    name: str
    brick: Path
    mount: Path
    options: dict[str, str]
    loop_mount: Path | None = None  # set when the brick lives on a small loop file system

    def teardown(self) -> None:
        _run("umount", "-l", str(self.mount), check=False)
        _run("gluster", "--mode=script", "volume", "stop", self.name, "force", check=False)
        _run("gluster", "--mode=script", "volume", "delete", self.name, check=False)
        if self.loop_mount is not None:
            _run("umount", "-l", str(self.loop_mount), check=False)


GLUSTERD_LOG = Path("/var/log/glusterfs/glusterd.log")


def _glusterd_refusal() -> str:
    """Why glusterd exited at start: it prints nothing, its log's last errors say (a listener
    that could not bind: who holds the management port)."""
    try:
        lines = GLUSTERD_LOG.read_text(errors="replace").splitlines()[-200:]
    except OSError as exc:
        return f"(no log: {exc})"
    starts = [i for i, line in enumerate(lines) if "Started running" in line]
    errors = [line for line in lines[starts[-1] if starts else 0:] if "] E [" in line][:3]
    holder = _run("ss", "-Hltnp", "sport = :24007", check=False).stdout.strip() if shutil.which("ss") else ""
    return "; ".join(errors) + (f"; port 24007 held by: {holder}" if holder else "")


@contextlib.contextmanager
def glusterd_turn() -> Iterator[None]:
    """One test session at a time at glusterd (starting it, creating or removing volumes,
    deciding to stop it): scripts/test runs pytest processes side by side, and glusterd
    refuses a volume operation while another is in progress ("Another transaction is in
    progress"), and two sessions could both start it or one stop it under the other."""
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / "glusterd.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class Gluster:
    """glusterd on this machine (started if not running) and the volumes made here."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.glusterd_pid: int | None = None
        self.volumes: list[GlusterVolume] = []
        self.host = socket.gethostname()

    def start(self) -> None:
        reason = gluster_unavailable_reason()
        if reason:
            raise Unavailable(reason)
        with glusterd_turn():
            if _run("pgrep", "-x", "glusterd", check=False).returncode != 0:
                started = _run("glusterd", check=False)  # daemonizes; remember its pid to stop exactly that process
                if started.returncode != 0:
                    raise RuntimeError(f"glusterd failed ({started.returncode}): {_glusterd_refusal()}")
                found = _run("pgrep", "-x", "glusterd", check=False).stdout.split()
                self.glusterd_pid = int(found[0]) if found else None
            self._wait_for_glusterd()
            self._reap_stale()

    def _wait_for_glusterd(self) -> None:
        deadline = time.monotonic() + 60
        while _run("gluster", "--mode=script", "volume", "list", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("glusterd did not answer within 60s")
            time.sleep(0.5)

    def _volumes(self) -> list[str]:
        out = _run("gluster", "--mode=script", "volume", "list", check=False).stdout
        return [v for v in out.split() if v and "No" not in out]

    def _reap_stale(self) -> None:
        """Volumes of an earlier test session that died (their brick directory is gone)."""
        for name in self._volumes():
            if not re.fullmatch(r"vp[ts][0-9a-f]{6}", name):
                continue
            info = _run("gluster", "--mode=script", "volume", "info", name, check=False).stdout
            bricks = re.findall(r"^Brick\d+: [^:]+:(/\S+)$", info, re.M)
            if bricks and not any(os.path.exists(b) for b in bricks):
                _run("gluster", "--mode=script", "volume", "stop", name, "force", check=False)
                _run("gluster", "--mode=script", "volume", "delete", name, check=False)

    def create_volume(
        self, name: str, *, size_mib: int | None = None, options: dict[str, str] | None = None
    ) -> GlusterVolume:
        """A single-brick volume, FUSE-mounted. With size_mib the brick is a loop-mounted
        ext4 file system of that size, so the volume really fills up."""
        options = dict(GLUSTER_OPTIONS if options is None else options)
        base = self.workdir / name
        base.mkdir(parents=True, exist_ok=True)
        loop_mount = None
        if size_mib is not None:
            image = base / "brick.img"
            with open(image, "wb") as fh:
                fh.truncate(size_mib << 20)
            _run("mkfs.ext4", "-q", "-F", str(image))
            loop_mount = base / "fs"
            loop_mount.mkdir(exist_ok=True)
            _run("mount", "-o", "loop", str(image), str(loop_mount))
            brick = loop_mount / "brick"
        else:
            brick = base / "brick"
        brick.mkdir(exist_ok=True)
        mount = base / "mnt"
        mount.mkdir(exist_ok=True)
        vol = GlusterVolume(name, brick, mount, options, loop_mount)
        self.volumes.append(vol)
        with glusterd_turn():
            _run("gluster", "--mode=script", "volume", "create", name, f"{self.host}:{brick}", "force")
            for key, value in options.items():
                _run("gluster", "--mode=script", "volume", "set", name, key, value)
            _run("gluster", "--mode=script", "volume", "start", name)
        deadline = time.monotonic() + 60
        while True:
            proc = _run("mount", "-t", "glusterfs", f"{self.host}:/{name}", str(mount), check=False)
            if proc.returncode == 0 and os.path.ismount(mount):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"mounting {name} failed: {proc.stderr.strip()}")
            time.sleep(1)
        return vol

    def stop(self) -> None:
        with glusterd_turn():
            self._stop()

    def _stop(self) -> None:
        if self.volumes and _run("gluster", "--mode=script", "volume", "list", check=False).returncode != 0:
            # Another session stopped the glusterd we shared: start one to clean up.
            _run("glusterd", check=False)
            found = _run("pgrep", "-x", "glusterd", check=False).stdout.split()
            self.glusterd_pid = int(found[0]) if found else None
            self._wait_for_glusterd()
        for vol in reversed(self.volumes):
            vol.teardown()
        self.volumes.clear()
        if self._volumes():
            return  # volumes of another session still use this glusterd
        if self.glusterd_pid is not None:
            try:
                os.kill(self.glusterd_pid, 15)  # the daemon this harness started, by pid
            except ProcessLookupError:
                pass
            self.glusterd_pid = None
