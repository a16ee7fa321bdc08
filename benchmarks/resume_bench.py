"""Lost work on a lost or evicted coordinator: steps redone after a restart, with and without
checkpoints, side by side in one run. Reported, not asserted.

The TF2 parameter-server example (chief + 1 PS + 2 workers) runs through the train step's
wait (steps/_waiting.run, following the progress lines) on the local backend, real
TensorFlow processes. Once the chief reports a step past --stop-at, its pod is stopped:

  * sigkill, checkpoints every --checkpoint-every steps: a lost node / OOM kill;
  * sigterm, checkpoints every --checkpoint-every steps: an eviction with a grace period
    (the example checkpoints on SIGTERM);
  * sigkill, no periodic checkpoints: what training code without them loses.

The job restarts (PodFailed -> RestartJob) and finishes. For each: the last step reported
before the stop, the step the restart resumed from (`resumed_from_step`, 0 when it started
again), the steps redone (their difference), and the wall time of the whole job.

    python benchmarks/resume_bench.py [--steps 3000] [--stop-at 1300] [--checkpoint-every 500]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from volcano_pipelines.backends.local import LocalBackend
from volcano_pipelines.steps._follow import FollowPolicy
from volcano_pipelines.steps._waiting import WaitPolicy, run
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, Role, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2"}
SCENARIOS = (("sigkill", True), ("sigterm", True), ("sigkill", False))


def make_dataset(out: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_dataset", EXAMPLES / "data" / "make_dataset.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.make_dataset(str(out))


def last_progress(log: str) -> int:
    steps = re.findall(r"vpipe:progress step=(\d+)", log)
    return int(steps[-1]) if steps else 0


def scenario(root: Path, data: Path, how: str, checkpoints: bool, args: argparse.Namespace) -> dict[str, Any]:
    name = f"{how}-{'ckpt' if checkpoints else 'none'}"
    backend = LocalBackend(root / name, data_dir=data, log_dir=root / name / "logs", output=None, grace_seconds=30)
    every = args.checkpoint_every if checkpoints else 10 * args.steps
    manifest = build_tf_job(TFJobSpec(
        job=JobOptions(name="bench", max_retry=2), code=CodeSource(path=str(EXAMPLES / "tf-ps")),
        ps=Role(env=QUIET_TF), worker=Role(replicas=2, env=QUIET_TF), chief=Role(env=QUIET_TF),
        args=("--api=tf2", f"--steps={args.steps}", "--threads=1", "--log_every=50", f"--checkpoint_every={every}"),
    ))
    stopped: dict[str, Any] = {}

    def stopper() -> None:
        while not stopped:
            for r in backend.replicas("default", "bench"):
                if r["pod"] != "bench-chief-0" or r["attempt"] != 0 or not r["pid"] or r["finished_at"]:
                    continue
                log = Path(r["log"]).read_text(errors="replace") if Path(r["log"]).exists() else ""
                if last_progress(log) >= args.stop_at:
                    if how == "sigkill":
                        os.killpg(r["pid"], signal.SIGKILL)
                    else:
                        os.kill(r["pid"], signal.SIGTERM)
                    stopped["at"] = r
            time.sleep(0.1)

    thread = threading.Thread(target=stopper, daemon=True)
    thread.start()
    began = time.monotonic()
    result = run(backend, manifest, WaitPolicy(timeout_seconds=1800, follow=FollowPolicy(interval_seconds=2)),
                 handle_signals=False)
    seconds = time.monotonic() - began
    backend.close()
    first = next(r for r in backend.replicas("default", "bench") if r["pod"] == "bench-chief-0" and r["attempt"] == 0)
    before = last_progress(Path(first["log"]).read_text(errors="replace"))
    resumed = result.resumed_from_step or 0
    return {"scenario": f"{how}, {f'checkpoints every {every}' if checkpoints else 'no checkpoints'}",
            "phase": result.phase, "restarts": result.retries, "last_step_before_stop": before,
            "resumed_from_step": resumed, "steps_redone": before - resumed, "job_seconds": round(seconds, 1),
            "chief_exit_code": first["exit_code"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--stop-at", type=int, default=1300)
    parser.add_argument("--checkpoint-every", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vpipe-resume-bench-") as tmp:
        root = Path(tmp)
        make_dataset(root / "data")
        rows = [scenario(root, root / "data", how, checkpoints, args) for how, checkpoints in SCENARIOS]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"TF2 PS example, {args.steps} steps, chief stopped once it reported step >= {args.stop_at}")
    print(f"{'scenario':<36} {'phase':<10} {'before stop':>11} {'resumed at':>10} {'redone':>7} {'job s':>7} {'exit':>5}")
    for r in rows:
        print(f"{r['scenario']:<36} {r['phase']:<10} {r['last_step_before_stop']:>11} {r['resumed_from_step']:>10} "
              f"{r['steps_redone']:>7} {r['job_seconds']:>7} {r['chief_exit_code']!s:>5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
