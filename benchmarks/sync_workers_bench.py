"""Benchmark `vpipe sync --workers N` (docs/sync.md, "Many pods") on this machine, in one run:

  plan   the coordinator's own cost at 10k and 100k files: the one-process plan (build_plan on
         the two listings) and what --workers adds to it (split into N partitions, write run.json
         and the partitions), and what one copy pod pays to start (read the run and its partition)
  copy   the same dataset from a real MiniDFSCluster into a fresh directory of a real GlusterFS
         volume with 1, 2 and 3 copy processes beside rclone (--transfers 16): each copy process
         is what a copy pod runs (`python -m volcano_pipelines.transfer.worker`), started by a
         launcher in place of the Volcano Job, so wall time, per-process MB/s and CPU are the
         pods' own; `vpipe-1` is the one-process path (no partitions, no pods)

On one machine every copy process shares the same 2 cores, one DataNode and one brick: this
shows the coordinator's overhead and that per-process efficiency is unchanged, not the scaling
a cluster gives (docs/sync.md has the model of that). Every copy is checked (file count and
bytes); runs are interleaved, `--repeat` times (at least 3 unless --smoke).

`--hdfs-native patched`: the copy processes (and `vpipe-1`) run with the patched hdfs-native
of images/hdfs-native/ first on PYTHONPATH, as the runtime image's copy pods do.

  python benchmarks/sync_workers_bench.py --repeat 3
  python benchmarks/sync_workers_bench.py --repeat 3 --hdfs-native patched
  python benchmarks/sync_workers_bench.py --smoke
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks.sync_bench import drop_caches, fresh, patched_site, populate, read_path, tree_size  # noqa: E402
from tests.storage.harness import Gluster, start_hdfs  # noqa: E402
from volcano_pipelines.transfer import engine, partition  # noqa: E402
from volcano_pipelines.transfer.executor import Options  # noqa: E402
from volcano_pipelines.transfer.plan import Action, Entry, build_plan  # noqa: E402
from volcano_pipelines.transfer.progress import Progress  # noqa: E402
from volcano_pipelines.transfer.urls import parse_source  # noqa: E402


def cpu_now() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def children_cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def plan_cost(files: int, workers: int, work: Path) -> dict[str, float]:
    """CPU seconds of the one-process plan, of what --workers adds, and of one pod's start."""
    source = [Entry(f"d{i // 1000:03d}/f{i:07d}.bin", 4096 + i % 977, 1_700_000_000_000 + i) for i in range(files)]
    t0 = cpu_now()
    plan = build_plan(source, [])
    t1 = cpu_now()
    parts = partition.split(plan.of(Action.COPY, Action.COMPARE), workers)
    record = partition.RunRecord(run_id="bench", src="hdfs://nn/x", user=None, options=vars(Options()).copy(),
                                 parts=len(parts), job="vpipe-sync-bench", files_selected=files,
                                 selected=[[e.path, e.size, e.mtime_ms] for e in plan.selected])
    root = work / f"plan-{files}"
    partition.save_run(str(root), record, parts)
    t2 = cpu_now()
    partition.load_run(str(root), "bench")
    partition.load_part(str(root), "bench", 0)
    t3 = cpu_now()
    size = sum(p.stat().st_size for p in Path(partition.run_dir(str(root), "bench")).iterdir())
    shutil.rmtree(root)
    return {"plan": t1 - t0, "partition": t2 - t1, "pod_start": t3 - t2, "bytes": float(size)}


def process_launcher(root: str, worker_cpu: list[float], pod_walls: list[float],
                     env: dict[str, str] | None = None) -> Callable[[partition.RunRecord], str | None]:
    """Runs each partition as a process of its own (what a copy pod runs), all at once."""
    def launch(record: partition.RunRecord) -> str | None:
        before = children_cpu()
        t0 = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-m", "volcano_pipelines.transfer.worker", "--root", root,
                                   "--run-id", record.run_id, "--part", str(k)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
                 for k in range(record.parts)]
        errors = [p.communicate()[1][-500:] for p in procs if p.wait() != 0]
        pod_walls.append(time.monotonic() - t0)
        worker_cpu.append(children_cpu() - before)
        return "; ".join(errors) or None
    return launch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large-files", type=int, default=6)
    ap.add_argument("--large-total-mib", type=int, default=768)
    ap.add_argument("--small-files", type=int, default=3000)
    ap.add_argument("--small-kib", type=int, default=16)
    ap.add_argument("--workers", default="1,2,3")
    ap.add_argument("--plan-files", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rclone", default=shutil.which("rclone") or str(Path(sys.executable).parent / "rclone"))
    ap.add_argument("--hdfs-native", choices=("stock", "patched"), default="stock",
                    help="the copy processes' hdfs-native: this environment's, or images/hdfs-native/'s patched wheel")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one run each (CI: keeps the script from rotting)")
    args = ap.parse_args()
    if args.smoke:
        args.large_files, args.large_total_mib, args.small_files, args.repeat = 2, 16, 40, 1
        args.plan_files = "2000"
    elif args.repeat < 3:
        ap.error("--repeat: at least 3")
    counts = [int(n) for n in args.workers.split(",")]
    copy_env = dict(os.environ)
    if args.hdfs_native == "patched":
        copy_env["PYTHONPATH"] = os.pathsep.join([str(patched_site()), copy_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    copy_path = read_path(copy_env)
    if args.hdfs_native == "patched" and copy_path != "hdfs-readinto":
        raise RuntimeError(f"the patched hdfs-native did not give the copy processes the readinto path: {copy_path}")
    work = Path(tempfile.mkdtemp(prefix="vpipe-wbench-"))
    load_start = os.getloadavg()

    print("plan: CPU seconds (median of the runs) for the coordinator at N files, 3 partitions")
    for files in (int(n) for n in args.plan_files.split(",")):
        costs = [plan_cost(files, 3, work) for _ in range(args.repeat)]
        med = {k: statistics.median(c[k] for c in costs) for k in costs[0]}
        print(f"  {files:>7} files: plan {med['plan']:.3f}s, + partitions written {med['partition']:.3f}s "
              f"({med['partition'] / med['plan']:.2f}x the plan; {med['bytes'] / 1e6:.1f} MB of run files), "
              f"a pod's start (read run + partition) {med['pod_start']:.3f}s", flush=True)

    hdfs = start_hdfs(work / "hdfs")
    gluster = Gluster(work / "gluster")
    rows: dict[str, list[tuple[float, float, float]]] = {}
    copier_cpu: dict[str, list[float]] = {}  # the copy processes' own CPU (vpipe-1: its one process)
    per_pod: dict[str, list[float]] = {}
    try:
        gluster.start()
        mount = gluster.create_volume(f"vpw{uuid.uuid4().hex[:6]}").mount
        large = (args.large_total_mib << 20) // args.large_files
        populate(hdfs, "/bench/ds/large", args.large_files, large, per_dir=args.large_files)
        populate(hdfs, "/bench/ds/small", args.small_files, args.small_kib << 10, per_dir=500)
        shape = (args.large_files + args.small_files, args.large_files * large + args.small_files * (args.small_kib << 10))
        print(f"\ncopy: {args.large_files} x {large >> 20} MiB + {args.small_files} x {args.small_kib} KiB "
              f"({shape[1] / 1e6:.0f} MB) from HDFS into GlusterFS, {args.repeat} interleaved run(s)", flush=True)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], check=True, capture_output=True)
        src = f"{hdfs.url}/bench/ds"
        tools = [f"vpipe-{n}" for n in counts] + (["rclone-t16"] if os.path.exists(args.rclone) else [])
        for rep in range(args.repeat):
            for tool in tools[rep % len(tools):] + tools[:rep % len(tools)]:
                dst = fresh(mount, tool)
                drop_caches()
                t0, cpu0, kids0 = time.monotonic(), cpu_now(), children_cpu()
                pods_cpu: float | None = None
                if tool == "rclone-t16":
                    subprocess.run([args.rclone, "copy", f":hdfs,namenode='{hdfs.rpc}',username=root:/bench/ds", str(dst),
                                    "--transfers", "16", "--checkers", "16"], check=True, capture_output=True)
                elif tool == "vpipe-1":
                    subprocess.run([sys.executable, "-m", "volcano_pipelines", "sync", "-q", src, str(dst)], check=True,
                                   capture_output=True, env=copy_env)
                    pods_cpu = children_cpu() - kids0
                else:
                    walls: list[float] = []
                    worker_cpu: list[float] = []
                    request = engine.SyncRequest(src=src, location=parse_source(src), root=str(dst),
                                                 workers=int(tool.split("-")[1]), run_id=uuid.uuid4().hex[:16],
                                                 job_name="bench",
                                                 launcher=process_launcher(str(dst), worker_cpu, walls, copy_env))
                    result = engine.run(request, Progress())
                    pods_cpu = sum(worker_cpu)
                    per_pod.setdefault(tool, []).extend(w["throughput_mb_s"] for w in result.workers)
                wall = time.monotonic() - t0
                cpu = (cpu_now() - cpu0) + (children_cpu() - kids0)
                got = tree_size(dst)
                if got != shape:
                    raise RuntimeError(f"{tool}: copied {got} (files, bytes), expected {shape}")
                rows.setdefault(tool, []).append((wall, cpu, shape[1] / 1e6 / wall))
                if pods_cpu is not None:
                    copier_cpu.setdefault(tool, []).append(pods_cpu)
                print(f"  {tool:<11} {wall:7.2f}s  cpu {cpu:6.2f}s", flush=True)
    finally:
        gluster.stop()
        hdfs.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()
    print(f"\nCPUs: {os.cpu_count()}; load average at the start {load_start[0]:.1f}, at the end {load_end[0]:.1f}")
    print(f"copy processes' hdfs-native: {args.hdfs_native} (hdfs:// read path {copy_path})")
    print("cpu: user + system of the copy (coordinator and copy processes; not HDFS, not GlusterFS); "
          "pods cpu/GiB: the copy processes' own (what the copy pods cost; vpipe-1: its one process); "
          "per-process MB/s: each copy process's bytes over its own time (median over processes and runs)")
    header = (f"{'tool':<11} {'min s':>7} {'median s':>8} {'MB/s':>7} {'cpu s':>6} {'cpu s/GiB':>9} {'pods cpu/GiB':>12} "
              f"{'per-process MB/s':>16} {'vs rclone':>9}")
    print(header)
    print("-" * len(header))
    best = statistics.median(w for w, _, _ in rows["rclone-t16"]) if "rclone-t16" in rows else None
    for tool, runs in rows.items():
        med = statistics.median(w for w, _, _ in runs)
        cpu = statistics.median(c for _, c, _ in runs)
        pods = f"{statistics.median(per_pod[tool]):.1f}" if per_pod.get(tool) else "-"
        ratio = f"{best / med:.2f}x" if best else "-"
        own = f"{statistics.median(copier_cpu[tool]) / (shape[1] / 2**30):.2f}" if copier_cpu.get(tool) else "-"
        print(f"{tool:<11} {min(w for w, _, _ in runs):>7.2f} {med:>8.2f} {shape[1] / 1e6 / med:>7.1f} {cpu:>6.2f} "
              f"{cpu / (shape[1] / 2**30):>9.2f} {own:>12} {pods:>16} {ratio:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
