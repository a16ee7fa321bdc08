"""Reap benchmark: how long parameter servers outlive the workers, with the reap sweeper vs
Volcano's own TaskCompleted -> CompleteJob policy, side by side in one run; and how many API
requests the sweeper makes per job as the number of jobs grows.

For each N (default 10 and 20) on the local control plane (tests/cluster; kwok fake pods):
  * N hand-made Volcano Jobs WITHOUT the completion policy (1 PS + 2 workers), reaped by one
    `vpipe reap --selector ... --grace 0` sweeper started before the jobs;
  * N identical jobs WITH the policy on the worker task (Volcano ends them itself);
  * latency per job = from the moment the last worker pod was seen Succeeded to the moment
    the PS pod was seen deleted, both observed by one watch of the benchmark's own (its
    requests are not counted); p50 / p95 per kind;
  * the sweeper's API requests, read from the apiserver's audit log by user agent (vpipe/...),
    distinct audit IDs, by verb and resource.

    python benchmarks/reap_bench.py [--jobs 10 20] [--nodes 4] [--run-for 5]

Needs the control plane binaries (`python -m tests.cluster build`).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch

from tests.cluster import behaviour, build
from tests.cluster.launcher import ControlPlane, NodeShape

STEP_USER_AGENT_PREFIX = "vpipe/"
BENCH_USER_AGENT = "vpipe-reap-bench"
VPIPE = [sys.executable, "-c", "import sys; from volcano_pipelines.cli import main; sys.exit(main())"]


def job_manifest(name: str, namespace: str, kind: str, run_for: int) -> dict[str, Any]:
    def task(task_name: str, replicas: int, labels: dict[str, str], policies: list[dict[str, str]] | None) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": task_name, "replicas": replicas, "minAvailable": replicas, "template": {
            "metadata": {"labels": {"bench": kind, **labels}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "tf", "image": "tensorflow/tensorflow:2.16.1", "command": ["python3", "train.py"],
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]}}}
        if policies:
            entry["policies"] = policies
        return entry
    completes = [{"event": "TaskCompleted", "action": "CompleteJob"}] if kind == "volcano" else None
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {"bench": kind}},
            "spec": {"schedulerName": "volcano", "queue": "default", "minAvailable": 3,
                     "tasks": [task("ps", 1, {}, None), task("worker", 2, behaviour.run_for(run_for), completes)]}}


class Observer:
    """One pod watch over the namespace: when each job's last worker succeeded, when its PS
    pod was deleted (monotonic seconds)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace
        self.workers_done: dict[str, dict[str, float]] = {}
        self.ps_gone: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        version = None
        while not self.stop.is_set():
            stream = watch.Watch()
            try:
                kwargs: dict[str, Any] = {"timeout_seconds": 30, "label_selector": "volcano.sh/job-name"}
                if version:
                    kwargs["resource_version"] = version
                for event in stream.stream(self.core.list_namespaced_pod, self.namespace, **kwargs):
                    now = time.monotonic()
                    pod = event["object"]
                    version = pod.metadata.resource_version
                    job = pod.metadata.labels.get("volcano.sh/job-name")
                    task = pod.metadata.labels.get("volcano.sh/task-spec")
                    if task == "worker" and pod.status.phase == "Succeeded":
                        self.workers_done.setdefault(job, {}).setdefault(pod.metadata.name, now)
                    if task == "ps" and event["type"] == "DELETED":
                        self.ps_gone.setdefault(job, now)
                    if self.stop.is_set():
                        break
            except client.ApiException as err:
                if err.status == 410:
                    version = None
                    continue
                raise
            except Exception:  # noqa: BLE001 - a dropped watch (the control plane stopping): resume or end
                if self.stop.is_set():
                    return
                time.sleep(0.5)

    def latency(self, job: str) -> float | None:
        done = self.workers_done.get(job, {})
        if len(done) < 2 or job not in self.ps_gone:
            return None
        return self.ps_gone[job] - max(done.values())


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def audit_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def run_round(plane: ControlPlane, jobs: int, run_for: int) -> dict[str, Any]:
    namespace = f"bench-reap-{jobs}"
    api = plane.api_client()
    api.user_agent = BENCH_USER_AGENT
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": namespace}})
    observer = Observer(core, namespace)
    observer.thread.start()
    audit_start = audit_lines(plane.audit_log)
    sweeper = subprocess.Popen([*VPIPE, "reap", "--selector", "bench=sweeper", "-n", namespace, "--grace", "0",
                                "--timeout", "1800", "--json", "-q", "--kubeconfig", str(plane.kubeconfig)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # the sweeper lists and watches before the jobs exist
    started = time.monotonic()
    names = {kind: [f"{kind[0]}-{i}" for i in range(jobs)] for kind in ("sweeper", "volcano")}
    for i in range(jobs):  # interleaved: both kinds see the same load at the same time
        for kind in ("sweeper", "volcano"):
            custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs",
                                                   job_manifest(names[kind][i], namespace, kind, run_for))
    every = names["sweeper"] + names["volcano"]
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and not all(observer.latency(j) is not None for j in every):
        time.sleep(1)
    elapsed = time.monotonic() - started
    sweeper.send_signal(signal.SIGTERM)
    stdout, stderr = sweeper.communicate(timeout=120)
    observer.stop.set()
    if sweeper.returncode != 0:
        raise SystemExit(f"the sweeper failed ({sweeper.returncode}):\n{stderr[-3000:]}")
    result = json.loads(stdout)
    time.sleep(2)  # the audit backend flushes
    lines = plane.audit_log.read_text().splitlines()[audit_start:]
    events = {e["auditID"]: e for e in (json.loads(line) for line in lines if line.strip())
              if e.get("userAgent", "").startswith(STEP_USER_AGENT_PREFIX)}
    by_kind = Counter(f"{e['verb']} {e.get('objectRef', {}).get('resource', '?')}" for e in events.values())
    latencies = {kind: [observer.latency(j) for j in names[kind]] for kind in names}
    missing = {kind: sum(v is None for v in vals) for kind, vals in latencies.items()}
    measured = {kind: [v for v in vals if v is not None] for kind, vals in latencies.items()}
    step_linger = [r["linger_seconds"] for r in result["reaped"] if r["linger_seconds"] is not None]
    return {
        "jobs_per_kind": jobs,
        "seconds_until_all_ps_gone": round(elapsed, 1),
        "latency_seconds": {kind: {"p50": round(statistics.median(v), 2) if v else None,
                                   "p95": round(percentile(v, 95), 2) if v else None,
                                   "max": round(max(v), 2) if v else None, "measured": len(v), "missing": missing[kind]}
                            for kind, v in measured.items()},
        "sweeper_reaped": len(result["reaped"]),
        "sweeper_linger_seconds_p50": round(statistics.median(step_linger), 2) if step_linger else None,
        "sweeper_api_requests": len(events),
        "sweeper_api_requests_per_job": round(len(events) / jobs, 2),
        "sweeper_api_requests_by_verb_resource": dict(sorted(by_kind.items())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, nargs="+", default=[10, 20], help="jobs of each kind, one round per value")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--run-for", type=int, default=5, help="seconds each worker runs")
    args = parser.parse_args()

    bin_dir = build.build(log=lambda m: print(m, file=sys.stderr))
    shape = NodeShape(count=args.nodes, cpu="32", memory="128Gi", gpus=0, pods=250)
    with tempfile.TemporaryDirectory(prefix="vpipe-reap-bench-") as tmp, \
            ControlPlane(state_dir=Path(tmp), bin_dir=bin_dir, nodes=shape, log=lambda m: print(m, file=sys.stderr)) as plane:
        rounds = [run_round(plane, jobs, args.run_for) for jobs in args.jobs]
    print(json.dumps({"nodes": args.nodes, "run_for": args.run_for, "rounds": rounds}, indent=2))
    print("\n| jobs per kind | PS linger p50 / p95: reap sweeper | PS linger p50 / p95: Volcano CompleteJob policy "
          "| sweeper API requests | per job |", file=sys.stderr)
    print("|---|---|---|---|---|", file=sys.stderr)
    for r in rounds:
        s, v = r["latency_seconds"]["sweeper"], r["latency_seconds"]["volcano"]
        print(f"| {r['jobs_per_kind']} | {s['p50']} s / {s['p95']} s | {v['p50']} s / {v['p95']} s | "
              f"{r['sweeper_api_requests']} | {r['sweeper_api_requests_per_job']} |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
