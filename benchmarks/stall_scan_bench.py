"""What hung-task detection costs at the seed's size (docs/progress.md "Hung tasks"): 1,000
parameter servers + 10,000 workers, one heartbeat file each (examples/tf-ps/heartbeat.py).
Reported, not asserted.

Measured on this machine's disk, in one run:

  * the coordinator's scan (one directory listing, one small read per file) of 11,000 files,
    cold (the first, after the files were written) and warm (the next ones), wall and CPU
    seconds;
  * one task's beat (a temporary file written and renamed over the old one), wall and CPU
    per write, and what the volume sees at 11,000 tasks per beat interval;
  * the space the files take.

    python benchmarks/stall_scan_bench.py [--ps 1000] [--workers 10000] [--dir DIR] [--scans 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

HEARTBEAT = Path(__file__).resolve().parents[1] / "examples" / "tf-ps" / "heartbeat.py"


def heartbeat_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("heartbeat", HEARTBEAT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn: object) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()  # type: ignore[operator]
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ps", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=10000)
    parser.add_argument("--dir", default=None, help="where the files go (default: a temporary directory)")
    parser.add_argument("--scans", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600.0, help="the stall timeout (sets the beat interval)")
    args = parser.parse_args()
    hb = heartbeat_module()
    root = Path(tempfile.mkdtemp(prefix="stall-bench-", dir=args.dir))
    try:
        os.environ["VPIPE_JOB_NAME"] = "bench"
        beats = [hb.Heartbeat(str(root), "ps", i, timeout=args.timeout) for i in range(args.ps)]
        beats += [hb.Heartbeat(str(root), "worker", i, timeout=args.timeout) for i in range(args.workers)]
        os.makedirs(beats[0].directory)
        for i, beat in enumerate(beats):
            if i % 500 == 3:  # a few tasks already past the timeout, so the scan has some to name
                beat.progress(100)
                beat.progressed = time.time() - 2 * args.timeout
        tasks = len(beats)
        wall, cpu = timed(lambda: [beat.write() for beat in beats])
        print(f"{tasks} heartbeat files written in {wall:.3f} s wall, {cpu:.3f} s CPU: "
              f"{1e6 * wall / tasks:.0f} us wall, {1e6 * cpu / tasks:.0f} us CPU per beat")
        size = sum(p.stat().st_size for p in Path(beats[0].directory).iterdir())
        blocks = sum(p.stat().st_blocks * 512 for p in Path(beats[0].directory).iterdir())
        print(f"space: {size} bytes of content ({size / tasks:.0f} per task), {blocks / 1e6:.1f} MB allocated")
        interval = hb.beat_interval(args.timeout)
        print(f"at a stall timeout of {args.timeout:g} s: a beat every {interval:g} s per task, "
              f"{tasks / interval:.0f} file writes + renames per second on the volume")
        since = time.time() - 3600
        results = []
        for n in range(args.scans):
            found: list[object] = []
            wall, cpu = timed(lambda found=found: found.extend(hb.scan(beats[0].directory, time.time(), since,
                                                                        args.timeout)))
            results.append((wall, cpu))
            print(f"scan {n + 1} ({'cold' if n == 0 else 'warm'}): {tasks} files, {len(found)} stalled, "
                  f"{wall:.3f} s wall, {cpu:.3f} s CPU")
        warm = results[1:] or results
        print(f"warm scan: {min(w for w, _ in warm):.3f}-{max(w for w, _ in warm):.3f} s wall, "
              f"{min(c for _, c in warm):.3f}-{max(c for _, c in warm):.3f} s CPU, once per {interval:g} s "
              f"({100 * max(c for _, c in warm) / interval:.2f}% of one core)")
        line = hb.stalled_line(hb.scan(beats[0].directory, time.time(), since, args.timeout), time.time())
        print(f"the line printed: {len(line)} characters: {line[:160]}{'...' if len(line) > 160 else ''}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
