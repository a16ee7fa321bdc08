"""Scale benchmark: TF jobs of P parameter servers + N workers through `vpipe train tf` on the
local control plane's fake nodes (default 100 PS + 1,000 workers: 1,100 pods, beside a
small job of 1 + 10).

Measures for each job:
  * seconds from submit to every pod Running, from there to Completed, and in all;
  * the waiting step's peak RSS and CPU seconds (its own process, from the kernel);
  * its API requests by verb and resource from the API server's audit log, and per 1,000
    pods: what it asks must not grow with the pods.

    python benchmarks/cluster_scale_bench.py [--ps 100] [--workers 1000] [--nodes 24]
        [--volcano-qps 50 --volcano-burst 100 --volcano-workers 3]   # Volcano's defaults

The control plane runs etcd as production clusters do (8 GiB quota, periodic compaction).
Starts its own control plane (tests/cluster), so it needs the binaries built
(`python -m tests.cluster build`). No container runs: pods are kwok's fakes.

Starts its own control plane (tests/cluster), so it needs the binaries built
(`python -m tests.cluster build`). No container runs: pods are kwok's fakes.
"""

from __future__ import annotations

import argparse
import json
import resource
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


def run_job(plane: ControlPlane, namespace: str, name: str, ps: int, workers: int, run_for: int,
            chief: bool = False) -> dict[str, Any]:
    api = plane.api_client()
    api.user_agent = BENCH_USER_AGENT
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": namespace}})
    _, audit_start = audit_events(plane.audit_log, 0)

    cmd = [*VPIPE, "train", "tf", "--name", name, "--namespace", namespace, "--ps", str(ps),
           "--workers", str(workers), "--ps-cpu", "10m", "--ps-memory", "32Mi",
           "--cpu-per-worker", "10m", "--memory-per-worker", "32Mi", "--timeout", "1800",
           "--code-url", "https://example.com/code/", "--kubeconfig", str(plane.kubeconfig), "--json",
           "--pod-label", f"worker:{behaviour.RUN_FOR_LABEL}={run_for}s"]
    if chief:  # it ends the job: it runs past the workers
        cmd += ["--chief", "--pod-label", f"chief:{behaviour.RUN_FOR_LABEL}={run_for + 20}s"]
    phases: dict[str, float] = {}
    pods = ps + workers + (1 if chief else 0)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    submitted = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def poll() -> None:
        while proc.poll() is None:
            try:
                job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name)
                status = job.get("status", {})
                phase = status.get("state", {}).get("phase")
                if phase and phase not in phases:
                    phases[phase] = time.monotonic() - submitted
                if status.get("running", 0) >= pods and "all pods Running" not in phases:
                    phases["all pods Running"] = time.monotonic() - submitted
            except client.ApiException:
                pass
            time.sleep(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    stdout, stderr = proc.communicate(timeout=2400)
    finished = time.monotonic() - submitted
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the step is this process's only child
    poller.join(timeout=5)
    if proc.returncode != 0:
        raise SystemExit(f"vpipe train failed ({proc.returncode}):\n{stderr[-3000:]}")
    result = json.loads(stdout)

    # Volcano's svc plugin's ConfigMap: every host twice (a role past one task's limit is
    # several tasks, volcano/slices.py); the API server holds it within 1 MiB.
    try:
        svc = core.read_namespaced_config_map(f"{name}-svc", namespace)
        svc_bytes: int | None = sum(len(v) for v in (svc.data or {}).values())
    except client.ApiException:
        svc_bytes = None
    job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name)
    tasks = {t["name"]: t["replicas"] for t in job["spec"]["tasks"]}
    time.sleep(2)  # let the audit backend flush the last events
    events, _ = audit_events(plane.audit_log, audit_start)
    # One request can log several stages (a watch logs ResponseStarted and ResponseComplete):
    # count distinct audit IDs.
    unique = {e["auditID"]: e for e in events}
    step = [e for e in unique.values() if e.get("userAgent", "").startswith(STEP_USER_AGENT_PREFIX)
            and e.get("objectRef", {}).get("namespace") in (namespace, None)]
    by_kind = Counter(f"{e['verb']} {e.get('objectRef', {}).get('resource', '?')}" for e in step)
    per_1000 = 1000 / pods
    all_running = phases.get("all pods Running", float("nan"))
    completed = phases.get("Completed", finished)
    return {
        "ps": ps,
        "workers": workers,
        "pods": pods,
        "phase": result["phase"],
        "min_success": job["spec"].get("minSuccess"),
        "volcano_tasks": tasks,
        "svc_configmap_bytes": svc_bytes,
        "result_tasks": result.get("tasks"),
        "seconds_submit_to_all_running": round(all_running, 1),
        "seconds_all_running_to_completed": round(completed - all_running, 1),
        "step_seconds": round(finished, 1),
        # ru_maxrss of waited-for children: the largest (the large job runs after the small one).
        "step_peak_rss_mb": round(after.ru_maxrss / 1024, 1),
        "step_cpu_seconds": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "step_api_requests": len(step),
        "step_api_requests_per_pod": round(len(step) / pods, 3),
        "step_api_requests_by_verb_resource": dict(sorted(by_kind.items())),
        "step_api_requests_by_verb_resource_per_1000_pods": {k: round(v * per_1000, 1) for k, v in sorted(by_kind.items())},
        "phases_seen": {k: round(v, 1) for k, v in phases.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ps", type=int, default=100)
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--small-workers", type=int, default=10, help="comparison job of 1 PS; 0 to skip")
    parser.add_argument("--chief", action="store_true", help="the large job has a chief (it ends the job; without one, "
                        "workers split over several tasks end it through spec.minSuccess)")
    parser.add_argument("--name", default="large", help="the large job's name: a longer name fits fewer workers in one "
                        "Volcano task (volcano/slices.py; 44 characters: 1,295), so the split is reached at a smaller size")
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument("--run-for", type=int, default=10, help="seconds each worker runs")
    parser.add_argument("--volcano-qps", type=float, default=50.0, help="Volcano controller's --kube-api-qps")
    parser.add_argument("--volcano-burst", type=int, default=100, help="Volcano controller's --kube-api-burst")
    parser.add_argument("--volcano-workers", type=int, default=3, help="Volcano controller's --worker-threads")
    args = parser.parse_args()

    bin_dir = build.build(log=lambda m: print(m, file=sys.stderr))
    shape = NodeShape(count=args.nodes, cpu="64", memory="256Gi", gpus=0, pods=1000)
    volcano = (f"--kube-api-qps={args.volcano_qps}", f"--kube-api-burst={args.volcano_burst}",
               f"--worker-threads={args.volcano_workers}")
    with tempfile.TemporaryDirectory(prefix="vpipe-bench-") as tmp:
        started = time.monotonic()
        with ControlPlane(state_dir=Path(tmp), bin_dir=bin_dir, nodes=shape, volcano_controller_args=volcano,
                          log=lambda m: print(m, file=sys.stderr)) as plane:
            startup = time.monotonic() - started
            runs = []
            if args.small_workers:
                runs.append(run_job(plane, "bench-small", "small", 1, args.small_workers, args.run_for))
            runs.append(run_job(plane, "bench-large", args.name, args.ps, args.workers, args.run_for, args.chief))
    report = {"nodes": args.nodes, "volcano_controller": list(volcano),
              "control_plane_startup_seconds": round(startup, 1), "runs": runs}
    print(json.dumps(report, indent=2))
    print(f"{'pods':>6} {'->all Running s':>15} {'->Completed s':>13} {'step s':>7} {'peak RSS MB':>11} "
          f"{'CPU s':>6} {'API req':>7} {'req/pod':>7}", file=sys.stderr)
    for run in runs:
        print(f"{run['pods']:>6} {run['seconds_submit_to_all_running']:>15} {run['seconds_all_running_to_completed']:>13} "
              f"{run['step_seconds']:>7} {run['step_peak_rss_mb']:>11} {run['step_cpu_seconds']:>6} "
              f"{run['step_api_requests']:>7} {run['step_api_requests_per_pod']:>7}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
