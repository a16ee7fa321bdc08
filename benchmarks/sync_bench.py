"""Benchmark `vpipe sync` against rclone (HDFS backend) and a sequential copy loop, same
source (a real MiniDFSCluster), same GlusterFS mount, same machine, one run:

  (a) a few large files        (default 8 files, 1 GiB in total)
  (b) many small files         (default 10,000 x 4 KiB)
  (c) a no-op re-sync of (b)
  raw: a plain sequential write of the same volume (dd, fsync at the end)

Each tool runs as a command (process start included) into a fresh directory, except (c),
which re-runs each tool on its own finished copy of (b). rclone runs with each value of
--rclone-transfers and its best time is reported. Prints a table with ratios and the
GlusterFS volume options used. Sizes are flags, so a quick run fits a busy machine:

  python benchmarks/sync_bench.py --large-total-mib 256 --small-files 2000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.storage.harness import GLUSTER_OPTIONS, Gluster, MiniHdfs, start_hdfs  # noqa: E402

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


CPU: dict[str, float] = {}  # last command's CPU seconds (user + system), by the tool's label
STDOUT: dict[str, str] = {}  # ... and its standard output


def timed(cmd: list[str], env: dict[str, str] | None = None, label: str = "") -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    elapsed = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if label:
        CPU[label] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        STDOUT[label] = proc.stdout
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed


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


def raw_write_mb_s(mount: Path, total: int) -> float:
    target = mount / "raw-write.bin"
    count = max(1, total // (8 << 20))
    drop_caches()
    elapsed = timed(["dd", "if=/dev/zero", f"of={target}", "bs=8M", f"count={count}", "conv=fsync", "status=none"])
    target.unlink()
    return count * (8 << 20) / 1e6 / elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large-files", type=int, default=8)
    ap.add_argument("--large-total-mib", type=int, default=1024)
    ap.add_argument("--small-files", type=int, default=10_000)
    ap.add_argument("--small-kib", type=int, default=4)
    ap.add_argument("--small-per-dir", type=int, default=1000, help="files per directory in (b) (all in one: flat)")
    ap.add_argument("--rclone-transfers", default="4,16,64", help="comma-separated; the best is reported")
    ap.add_argument("--vpipe-transfers", type=int, default=0, help="0: the built-in default")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool and case; the best is reported (the machine may be shared)")
    ap.add_argument("--rclone", default=shutil.which("rclone") or str(Path(sys.executable).parent / "rclone"))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--vpipe-cmd", choices=("module", "vpipe"), default="module",
                    help="module: python -m volcano_pipelines sync (default); vpipe: the vpipe entry point")
    args = ap.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="vpipe-bench-"))
    hdfs = start_hdfs(work / "hdfs")
    gluster = Gluster(work / "gluster")
    results: dict[str, dict[str, float | str]] = {}
    try:
        gluster.start()
        volume = gluster.create_volume("vpbench")
        mount = volume.mount
        large_size = (args.large_total_mib << 20) // args.large_files
        small_size = args.small_kib << 10
        print(f"populating HDFS: {args.large_files} x {large_size >> 20} MiB, {args.small_files} x {args.small_kib} KiB", flush=True)
        populate(hdfs, "/bench/large", args.large_files, large_size, per_dir=args.large_files)
        populate(hdfs, "/bench/small", args.small_files, small_size, per_dir=args.small_per_dir)

        env = dict(os.environ)
        # An installed package (an image) has its bytecode compiled; this checkout may run
        # with PYTHONDONTWRITEBYTECODE=1, so compile it once instead of at every start.
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=True, capture_output=True)
        if args.vpipe_cmd == "module":
            vpipe = [sys.executable, "-m", "volcano_pipelines", "sync", "-q"]
        else:
            vpipe = [str(Path(sys.executable).parent / "vpipe"), "sync", "-q"]
        start_module = min(timed([sys.executable, "-m", "volcano_pipelines", "sync", "--help"]) for _ in range(3))
        start_vpipe = min(timed([str(Path(sys.executable).parent / "vpipe"), "sync", "--help"]) for _ in range(3))
        if args.vpipe_transfers:
            vpipe += ["--transfers", str(args.vpipe_transfers)]
        rclone_remote = f":hdfs,namenode='{hdfs.rpc}',username=root:"
        rclone_transfers = [int(t) for t in args.rclone_transfers.split(",")]

        def run_vpipe(src: str, dst: Path, *extra: str) -> float:
            return timed([*vpipe, *extra, f"{hdfs.url}{src}", str(dst)], env, "vpipe")

        def run_rclone(src: str, dst: Path, transfers: int) -> float:
            return timed([args.rclone, "copy", f"{rclone_remote}{src}", str(dst), "--transfers", str(transfers),
                          "--checkers", str(max(8, transfers))], env, "rclone")

        def run_seq(src: str, dst: Path) -> float:
            return timed([sys.executable, "-c", SEQ_LOOP, hdfs.url, src, str(dst)], env)

        raw = raw_write_mb_s(mount, args.large_total_mib << 20)
        print(f"raw GlusterFS sequential write: {raw:.1f} MB/s", flush=True)

        for label, src, nbytes in (("a", "/bench/large", args.large_total_mib << 20), ("b", "/bench/small", args.small_files * small_size)):
            row: dict[str, float | str] = {"bytes": nbytes}
            rclone_best: dict[int, float] = {}
            rclone_cpu: dict[int, float] = {}
            for rep in range(args.repeat):  # tools interleaved, so load changes hit all of them
                drop_caches()
                secs = run_vpipe(src, fresh(mount, f"{label}-vpipe"))
                if secs < float(row.get("vpipe", secs + 1)):
                    row["vpipe"], row["vpipe_cpu"] = secs, CPU["vpipe"]
                print(f"({label}) vpipe {secs:.2f}s (cpu {CPU['vpipe']:.2f}s)", flush=True)
                for t in rclone_transfers:
                    drop_caches()
                    secs = run_rclone(src, fresh(mount, f"{label}-rclone-{t}"), t)
                    if secs < rclone_best.get(t, secs + 1):
                        rclone_best[t], rclone_cpu[t] = secs, CPU["rclone"]
                    print(f"({label}) rclone --transfers {t}: {secs:.2f}s (cpu {CPU['rclone']:.2f}s)", flush=True)
                drop_caches()
                secs = run_seq(src, fresh(mount, f"{label}-seq"))
                row["seq"] = min(secs, float(row.get("seq", secs)))
                print(f"({label}) sequential loop {secs:.2f}s", flush=True)
            t_best = min(rclone_best, key=lambda t: rclone_best[t])
            row["rclone"], row["rclone_t"], row["rclone_cpu"] = rclone_best[t_best], t_best, rclone_cpu[t_best]
            results[label] = row

        t = int(results["b"]["rclone_t"])
        row_c: dict[str, float | str] = {"bytes": 0, "rclone_t": t, "seq": "n/a"}
        first_c: dict[str, float] = {}
        for rep in range(max(3, args.repeat)):
            v = run_vpipe("/bench/small", mount / "b-vpipe", "--json")
            v_cpu = CPU["vpipe"]
            report = json.loads(STDOUT["vpipe"])
            print(f"(c) vpipe: destination directories read {report['dest_dirs_read']}, "
                  f"from the scan cache {report['dest_dirs_cached']}; copied {report['copied']}", flush=True)
            r = run_rclone("/bench/small", mount / f"b-rclone-{t}", t)
            print(f"(c) vpipe {v:.2f}s (cpu {v_cpu:.2f}s), rclone --transfers {t}: {r:.2f}s (cpu {CPU['rclone']:.2f}s)", flush=True)
            if rep == 0:
                first_c = {"vpipe": v, "rclone": r}
            if v < float(row_c.get("vpipe", v + 1)):
                row_c["vpipe"], row_c["vpipe_cpu"] = v, v_cpu
            if r < float(row_c.get("rclone", r + 1)):
                row_c["rclone"], row_c["rclone_cpu"] = r, CPU["rclone"]
        results["c"] = row_c

        print()
        print("GlusterFS: single brick on local disk, volume options: "
              + ", ".join(f"{k}={v}" for k, v in GLUSTER_OPTIONS.items()))
        print(f"HDFS: MiniDFSCluster (1 NameNode, 1 DataNode) on the same machine; CPUs: {os.cpu_count()}")
        print(f"sizes: (a) {args.large_files} x {large_size >> 20} MiB, (b) {args.small_files} x {args.small_kib} KiB "
              f"in directories of {args.small_per_dir}; "
              f"best of {args.repeat} run(s) per tool ((c): best of {max(3, args.repeat)}); rclone --transfers {args.rclone_transfers}")
        print(f"vpipe command: {' '.join(vpipe[:3] if args.vpipe_cmd == 'module' else vpipe[:2])} (default --transfers "
              f"{args.vpipe_transfers or 'built-in'}); process start (--help): python -m volcano_pipelines sync "
              f"{start_module:.2f}s, vpipe sync {start_vpipe:.2f}s")
        try:
            load = os.getloadavg()
            print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        except OSError:
            pass
        print()
        header = (f"{'case':<32} {'vpipe s':>9} {'rclone s':>9} {'(best -t)':>9} {'seq s':>8} {'vpipe MB/s':>10} "
                  f"{'rclone/vpipe':>12} {'seq/vpipe':>9} {'vpipe cpu':>9} {'rclone cpu':>10}")
        print(header)
        print("-" * len(header))
        names = {"a": "(a) large files", "b": "(b) small files", "c": "(c) no-op re-sync of (b)"}
        for key in ("a", "b", "c"):
            r = results[key]
            v, rc = float(r["vpipe"]), float(r["rclone"])
            mbs = f"{float(r['bytes']) / 1e6 / v:.1f}" if r["bytes"] else "-"
            seq = f"{float(r['seq']):.2f}" if r["seq"] != "n/a" else "n/a"
            seq_ratio = f"{float(r['seq']) / v:.2f}x" if r["seq"] != "n/a" else "n/a"
            print(f"{names[key]:<32} {v:>9.2f} {rc:>9.2f} {str(r['rclone_t']):>9} {seq:>8} {mbs:>10} {rc / v:>11.2f}x {seq_ratio:>9} "
                  f"{float(r['vpipe_cpu']):>9.2f} {float(r['rclone_cpu']):>10.2f}")
        a_mbs = float(results["a"]["bytes"]) / 1e6 / float(results["a"]["vpipe"])
        print(f"{'raw GlusterFS write (dd, fsync)':<32} {'':>9} {'':>9} {'':>9} {'':>8} {raw:>10.1f}")
        print(f"\n(a) vpipe throughput = {100 * a_mbs / raw:.0f}% of the raw write bandwidth")
        print(f"(c) first no-op run after the copy (it reads every destination directory and saves the scan "
              f"cache; the later runs reuse it): vpipe {first_c['vpipe']:.2f}s, rclone {first_c['rclone']:.2f}s "
              f"({first_c['rclone'] / first_c['vpipe']:.2f}x)")
        print("cpu: user + system seconds of the tool's own process (not GlusterFS, not HDFS)")
    finally:
        gluster.stop()
        hdfs.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
