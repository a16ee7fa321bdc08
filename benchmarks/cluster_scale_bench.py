"""Scale benchmark: one TF job of 1 PS + N workers (default 200) on 20 fake nodes.

Measures, through `vpipe train tf` on the local control plane:
  * seconds from submit to job phase Running and to Completed;
  * how many API requests the waiting step made, read from the apiserver's audit log
    (per user agent, verb and resource), and the same for a small job for comparison:
    the count must not grow with the number of pods.

    python benchmarks/cluster_scale_bench.py [--workers 200] [--small-workers 10] [--nodes 20]

Starts its own control plane (tests/cluster), so it needs the binaries built
(`python -m tests.cluster build`). No container runs: pods are kwok's fakes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client

from tests.cluster import behaviour, build
from tests.cluster.launcher import ControlPlane, NodeShape

# `vpipe` identifies itself as vpipe/<version> (volcano_pipelines.k8s.client.USER_AGENT). The
# benchmark's own client uses another agent, so its polling is not counted.
STEP_USER_AGENT_PREFIX = "vpipe/"
BENCH_USER_AGENT = "vpipe-scale-bench"
VPIPE = [sys.executable, "-c", "import sys; from volcano_pipelines.cli import main; sys.exit(main())"]


def audit_events(path: Path, since_line: int) -> tuple[list[dict[str, Any]], int]:
    lines = path.read_text().splitlines()
    events = [json.loads(line) for line in lines[since_line:] if line.strip()]
    return events, len(lines)


def run_job(plane: ControlPlane, namespace: str, name: str, workers: int, run_for: int) -> dict[str, Any]:
    api = plane.api_client()
    api.user_agent = BENCH_USER_AGENT
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": namespace}})
    _, audit_start = audit_events(plane.audit_log, 0)

    cmd = [*VPIPE, "train", "tf", "--name", name, "--namespace", namespace, "--ps", "1",
           "--workers", str(workers), "--ps-cpu", "250m", "--ps-memory", "256Mi",
           "--cpu-per-worker", "250m", "--memory-per-worker", "256Mi",
           "--code-url", "https://example.com/code/", "--kubeconfig", str(plane.kubeconfig), "--json",
           "--pod-label", f"worker:{behaviour.RUN_FOR_LABEL}={run_for}s"]
    phases: dict[str, float] = {}
    submitted = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def poll() -> None:
        while proc.poll() is None:
            try:
                job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name)
                phase = job.get("status", {}).get("state", {}).get("phase")
                if phase and phase not in phases:
                    phases[phase] = time.monotonic() - submitted
            except client.ApiException:
                pass
            time.sleep(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    stdout, stderr = proc.communicate(timeout=1800)
    finished = time.monotonic() - submitted
    poller.join(timeout=5)
    if proc.returncode != 0:
        raise SystemExit(f"vpipe train failed ({proc.returncode}):\n{stderr[-3000:]}")
    result = json.loads(stdout)

    time.sleep(2)  # let the audit backend flush the last events
    events, _ = audit_events(plane.audit_log, audit_start)
    # One request can log several stages (a watch logs ResponseStarted and ResponseComplete):
    # count distinct audit IDs.
    unique = {e["auditID"]: e for e in events}
    step = [e for e in unique.values() if e.get("userAgent", "").startswith(STEP_USER_AGENT_PREFIX)
            and e.get("objectRef", {}).get("namespace") in (namespace, None)]
    by_kind = Counter(f"{e['verb']} {e.get('objectRef', {}).get('resource', '?')}" for e in step)
    return {
        "workers": workers,
        "phase": result["phase"],
        "seconds_to_running": round(phases.get("Running", float("nan")), 1),
        "seconds_to_completed": round(phases.get("Completed", finished), 1),
        "step_seconds": round(finished, 1),
        "step_api_requests": len(step),
        "step_api_requests_by_verb_resource": dict(sorted(by_kind.items())),
        "phases_seen": {k: round(v, 1) for k, v in phases.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--small-workers", type=int, default=10, help="comparison job; 0 to skip")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--run-for", type=int, default=10, help="seconds each worker runs")
    args = parser.parse_args()

    bin_dir = build.build(log=lambda m: print(m, file=sys.stderr))
    shape = NodeShape(count=args.nodes, cpu="16", memory="64Gi", gpus=0, pods=250)
    with tempfile.TemporaryDirectory(prefix="vpipe-bench-") as tmp:
        started = time.monotonic()
        with ControlPlane(state_dir=Path(tmp), bin_dir=bin_dir, nodes=shape,
                          log=lambda m: print(m, file=sys.stderr)) as plane:
            startup = time.monotonic() - started
            runs = []
            if args.small_workers:
                runs.append(run_job(plane, "bench-small", "small", args.small_workers, args.run_for))
            runs.append(run_job(plane, "bench-large", "large", args.workers, args.run_for))
    report = {"nodes": args.nodes, "control_plane_startup_seconds": round(startup, 1), "runs": runs}
    print(json.dumps(report, indent=2))
    for run in runs:
        print(f"{run['workers']:>4} workers: Running after {run['seconds_to_running']}s, Completed after "
              f"{run['seconds_to_completed']}s; the waiting step made {run['step_api_requests']} API requests",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
