"""Scale benchmark: TF jobs of P parameter servers + N workers through `vpipe train tf` on the
local control plane's fake nodes (default 100 PS + 1,000 workers: 1,100 pods, beside a
small job of 1 + 10).

Measures for each job:
  * seconds from submit to every pod created (Volcano's controller: its --kube-api-qps /
    burst / --worker-threads), to every pod Running, from there to Completed, and in all;
  * the waiting step's peak RSS and CPU seconds (its own process, from the kernel);
  * its API requests by verb and resource from the API server's audit log, and per 1,000
    pods: what it asks must not grow with the pods;
  * then, for the large job, the steps that come after training, each its own process with
    its own figures (seconds, peak RSS, CPU seconds, API requests, lines printed): `vpipe
    status`, `vpipe reap` (the completed job: nothing to end), the exit handler's `finish_run`
    of a run that failed after training (it saves the post-mortem of every pod and deletes
    the job) and `vpipe status --post-mortem` showing that record;
  * with --stall, the large job's coordinator (its log served by kwok) names three workers as
    stalled once the job runs: the step must name them and, with --on-stall restart (the
    default), restart the job once (cause stalled), which then completes; with --on-stall
    warn, it names them on the job and the job goes on, the stall cleared once it was named.

    python benchmarks/cluster_scale_bench.py [--ps 100] [--workers 1000] [--nodes 24]
        [--volcano-qps 50 --volcano-burst 100 --volcano-workers 3]   # Volcano's defaults
        [--volcano-controller stock|patched]   # patched: tests/cluster/volcano_patch.py

The control plane runs etcd as production clusters do (8 GiB quota, periodic compaction).
Starts its own control plane (tests/cluster), so it needs the binaries built
(`python -m tests.cluster build`). No container runs: pods are kwok's fakes.
"""

from __future__ import annotations

import argparse
import json
import os
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

from tests.cluster import behaviour, build, volcano_patch
from tests.cluster.launcher import ControlPlane, NodeShape
from volcano_pipelines.volcano.stalls import stall_from_annotations

# `vpipe` identifies itself as vpipe/<version> (volcano_pipelines.k8s.client.USER_AGENT). The
# benchmark's own client uses another agent, so its polling is not counted.
STEP_USER_AGENT_PREFIX = "vpipe/"
BENCH_USER_AGENT = "vpipe-scale-bench"
# Each step process writes its own peak RSS (VmHWM: its memory since its exec) to the file
# this variable names when it exits. Not wait4's ru_maxrss: Linux carries the parent's RSS at
# fork into the child's maximum, so a step measured that way never looks smaller than the
# benchmark that started it.
PEAK_FILE_ENV = "VPIPE_BENCH_PEAK_FILE"
PEAK_PRELUDE = ("import atexit, os\n"
                "def _peak():\n"
                "    with open('/proc/self/status') as s, open(os.environ['" + PEAK_FILE_ENV + "'], 'w') as f:\n"
                "        f.write(next(line for line in s if line.startswith('VmHWM:')).split()[1])\n"
                "atexit.register(_peak)\n")
VPIPE = [sys.executable, "-c", PEAK_PRELUDE + "import sys; from volcano_pipelines.cli import main; sys.exit(main())"]


def audit_offset(path: Path) -> int:
    """Where the audit log ends now: the requests after it are the next step's."""
    return path.stat().st_size if path.exists() else 0


def step_requests(plane: ControlPlane, audit_start: int, namespace: str) -> list[dict[str, Any]]:
    """The step's requests (its user agent) in `namespace` or cluster-wide since `audit_start`
    (a byte offset), one per audit ID (a watch logs ResponseStarted and ResponseComplete). Read
    line by line, parsing only the step's: the log holds millions of the controllers' lines."""
    time.sleep(2)  # let the audit backend flush the last events
    unique: dict[str, dict[str, Any]] = {}
    with plane.audit_log.open("rb") as log:
        log.seek(audit_start)
        for line in log:
            if b'"userAgent":"' + STEP_USER_AGENT_PREFIX.encode() not in line:
                continue
            event = json.loads(line)
            unique[event["auditID"]] = event
    return [e for e in unique.values() if e.get("userAgent", "").startswith(STEP_USER_AGENT_PREFIX)
            and e.get("objectRef", {}).get("namespace") in (namespace, None)]


def peak_mb(path: Path) -> float | None:
    try:
        return round(int(path.read_text()) / 1024, 1)
    except (OSError, ValueError):
        return None


def by_verb_resource(requests: list[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(f"{e['verb']} {e.get('objectRef', {}).get('resource', '?')}" for e in requests).items()))


def measure(plane: ControlPlane, namespace: str, label: str, cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One step as its own process: its own rusage (wait4 on its pid, not the children's
    maximum, which the train step's peak would hide), its requests and what it printed."""
    audit_start = audit_offset(plane.audit_log)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.NamedTemporaryFile(prefix="peak-") as peak:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env={**env, PEAK_FILE_ENV: peak.name})
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        peak_rss = peak_mb(Path(peak.name))
    requests = step_requests(plane, audit_start, namespace)
    return {
        "step": label,
        "exit_code": proc.returncode,
        "seconds": round(seconds, 1),
        "peak_rss_mb": peak_rss,
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "api_requests": len(requests),
        "api_requests_by_verb_resource": by_verb_resource(requests),
        "stdout_lines": len(stdout.splitlines()),
        "stdout": stdout if len(stdout) < 4000 else stdout[:4000] + "...",
        "stderr_tail": stderr[-1500:],
    }


def after_training(plane: ControlPlane, namespace: str, name: str, run_id: str, state_dir: Path) -> list[dict[str, Any]]:
    """The steps a pipeline runs after training, on the large job as training left it."""
    env = {**os.environ, "XDG_STATE_HOME": str(state_dir)}  # the post-mortem record goes there
    kube = ["--kubeconfig", str(plane.kubeconfig)]
    finish = (PEAK_PRELUDE + "import json, sys; from volcano_pipelines.steps import Connection, finish_run; "
              "r = finish_run(sys.argv[1], pipeline_state='FAILED', error_message='serve failed', "
              "namespace=sys.argv[2], connection=Connection(sys.argv[3])); "
              "print(json.dumps({'outcome': r.outcome, 'cleanup': r.cleanup, 'post_mortem': r.post_mortem}))")
    return [
        measure(plane, namespace, "vpipe status", [*VPIPE, "status", name, "-n", namespace, *kube], env),
        # Bounded: a job whose gang has not started (or whose abort Volcano has not acted on yet)
        # has nothing to reap for a long while; the reap step's cost while it follows it is measured.
        measure(plane, namespace, "vpipe reap", [*VPIPE, "reap", name, "-n", namespace, "--grace", "0",
                                                 "--timeout", "300", *kube], env),
        measure(plane, namespace, "finish_run (run failed after training)",
                [sys.executable, "-c", finish, run_id, namespace, str(plane.kubeconfig)], env),
        measure(plane, namespace, "vpipe status --post-mortem",
                [*VPIPE, "status", name, "-n", namespace, "--post-mortem", *kube], env),
    ]


# Three workers the coordinator names as stalled (--stall), as examples/tf-ps's scanner prints them.
STALLED = "worker[17-19]"


class ChiefLog(threading.Thread):
    """The chief for --stall. Its log (kwok serves it for the pods of behaviour.LOGS_NAMESPACE):
    a progress report every 2 s and, from when the job first runs, the coordinator's line
    naming three stalled workers; then the line that says none is: after Volcano restarted the
    job (--on-stall restart) or once the step named the stall on the job (warn). The chief keeps
    running (behaviour.KEEP_RUNNING_LABEL) until then (restart: until the new chief runs; warn:
    until the step saw the stall cleared), then it is let go: it completes the job its run-for
    later, however long the gang took to start on a loaded machine."""

    def __init__(self, plane: ControlPlane, namespace: str, name: str, phases: dict[str, float], submitted: float,
                 on_stall: str = "restart") -> None:
        super().__init__(daemon=True)
        self.path, self.phases, self.submitted, self.on_stall = plane.task_log, phases, submitted, on_stall
        api = plane.api_client()
        api.user_agent = BENCH_USER_AGENT
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace, self.name, self.pod = namespace, name, f"{name}-chief-0"
        self.first_uid: str | None = None
        self.done = threading.Event()

    def _release_the_new_chief(self) -> bool:
        """Once the restarted job runs again (its whole gang: minAvailable is every pod)."""
        try:
            job = self.custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.namespace, "jobs", self.name)
            pod = self.core.read_namespaced_pod(self.pod, self.namespace)
        except client.ApiException:
            return False
        if ((job.get("status") or {}).get("state") or {}).get("phase") != "Running" or pod.metadata.uid == self.first_uid:
            return False
        self.core.patch_namespaced_pod(self.pod, self.namespace,
                                       {"metadata": {"labels": {behaviour.KEEP_RUNNING_LABEL: None}}})
        return True

    def _stall_on_the_job(self) -> dict[str, Any] | None:
        """The stall the step wrote on the job (--on-stall warn), None before it did."""
        try:
            job = self.custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.namespace, "jobs", self.name)
        except client.ApiException:
            return None
        return stall_from_annotations((job.get("metadata") or {}).get("annotations"))

    def _release_the_warned_chief(self) -> bool:
        """Once the step saw the stall cleared (--on-stall warn): the job goes on to complete."""
        stall = self._stall_on_the_job()
        if not stall or not stall.get("cleared"):
            return False
        self.core.patch_namespaced_pod(self.pod, self.namespace,
                                       {"metadata": {"labels": {behaviour.KEEP_RUNNING_LABEL: None}}})
        return True

    def run(self) -> None:
        step, released, named = 0, False, False
        while not self.done.wait(2.0):
            step += 100
            now = time.time()
            lines = [f"vpipe:progress step={step} total=10000000 time={now:.0f}"]
            running = self.phases.get("Running")
            if self.first_uid is None and running is not None:
                self.first_uid = self.core.read_namespaced_pod(self.pod, self.namespace).metadata.uid
            if self.on_stall == "warn" and running is not None and not named:
                named = self._stall_on_the_job() is not None
            if "restarted" in self.phases or named:
                lines.append(f"vpipe:stalled count=0 tasks=none time={now:.0f}")
                if not released:
                    released = self._release_the_warned_chief() if named else self._release_the_new_chief()
            elif running is not None:
                lines.append(f"vpipe:stalled count=3 tasks={STALLED} silent={STALLED} oldest=45 "
                             f"oldest_task=worker[17] time={now:.0f}")
            part = self.path.with_suffix(".part")
            part.write_text(behaviour.cri_log_lines(lines, now))
            part.replace(self.path)


def run_job(plane: ControlPlane, namespace: str, name: str, ps: int, workers: int, run_for: int,
            chief: bool = False, run_id: str | None = None, stall: bool = False, timeout: int = 1800,
            on_stall: str = "restart") -> dict[str, Any]:
    api = plane.api_client()
    api.user_agent = BENCH_USER_AGENT
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": namespace}})
    audit_start = audit_offset(plane.audit_log)

    cmd = [*VPIPE, "train", "tf", "--name", name, "--namespace", namespace, "--ps", str(ps),
           "--workers", str(workers), "--ps-cpu", "10m", "--ps-memory", "32Mi",
           "--cpu-per-worker", "10m", "--memory-per-worker", "32Mi", "--timeout", str(timeout),
           "--code-url", "https://example.com/code/", "--kubeconfig", str(plane.kubeconfig), "--json",
           "--pod-label", f"worker:{behaviour.RUN_FOR_LABEL}={run_for}s"]
    if run_id:
        cmd += ["--run-id", run_id]
    if chief:  # it ends the job: it runs past the workers (with --stall, 2 s once it is let go)
        cmd += ["--chief", "--pod-label", f"chief:{behaviour.RUN_FOR_LABEL}={2 if stall else run_for + 20}s"]
    if stall:  # the coordinator's log names stalled workers: the step restarts the job once (or warns)
        cmd += ["--stall-timeout", "30", "--on-stall", on_stall, "--progress-interval", "5",
                "--pod-label", f"chief:{behaviour.KEEP_RUNNING_LABEL}=true"]
    phases: dict[str, float] = {}
    pods = ps + workers + (1 if chief else 0)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    submitted = time.monotonic()
    peak = Path(tempfile.mkstemp(prefix="peak-")[1])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, PEAK_FILE_ENV: str(peak)})
    chief_log = ChiefLog(plane, namespace, name, phases, submitted, on_stall) if stall else None
    if chief_log is not None:
        chief_log.start()

    def poll() -> None:
        while proc.poll() is None:
            try:
                job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name)
                status = job.get("status", {})
                phase = status.get("state", {}).get("phase")
                if phase and phase not in phases:
                    phases[phase] = time.monotonic() - submitted
                if int(status.get("retryCount") or 0) >= 1 and "restarted" not in phases:
                    phases["restarted"] = time.monotonic() - submitted
                # Volcano's own count of the job's pods: how fast its controller creates them.
                made = sum(int(status.get(k) or 0) for k in ("pending", "running", "succeeded", "failed", "terminating", "unknown"))
                if made >= pods and "all pods created" not in phases:
                    phases["all pods created"] = time.monotonic() - submitted
                if status.get("running", 0) >= pods and "all pods Running" not in phases:
                    phases["all pods Running"] = time.monotonic() - submitted
            except client.ApiException:
                pass
            time.sleep(0.25)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    stdout, stderr = proc.communicate(timeout=timeout + 900)
    finished = time.monotonic() - submitted
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the step is this process's only child
    poller.join(timeout=5)
    if chief_log is not None:
        chief_log.done.set()
    try:
        result = json.loads(stdout)
    except ValueError:
        result = {}
    # A step that reached its --timeout (the job aborted, its record saved) is measured too.
    timed_out = "timed out" in str(result.get("message") or "")
    if proc.returncode != 0 and not timed_out:
        raise SystemExit(f"vpipe train failed ({proc.returncode}):\n{stderr[-3000:]}")
    step_peak = peak_mb(peak)
    peak.unlink(missing_ok=True)

    # Volcano's svc plugin's ConfigMap: every host twice (a role past one task's limit is
    # several tasks, volcano/slices.py); the API server holds it within 1 MiB.
    try:
        svc = core.read_namespaced_config_map(f"{name}-svc", namespace)
        svc_bytes: int | None = sum(len(v) for v in (svc.data or {}).values())
    except client.ApiException:
        svc_bytes = None
    job = custom.get_namespaced_custom_object("batch.volcano.sh", "v1alpha1", namespace, "jobs", name)
    tasks = {t["name"]: t["replicas"] for t in job["spec"]["tasks"]}
    step = step_requests(plane, audit_start, namespace)
    by_kind = by_verb_resource(step)
    per_1000 = 1000 / pods
    all_running = phases.get("all pods Running", float("nan"))
    completed = phases.get("Completed", finished)
    return {
        "ps": ps,
        "workers": workers,
        "pods": pods,
        "phase": result["phase"],
        "step_exit_code": proc.returncode,
        "step_message": result.get("message"),
        "step_post_mortem": {k: v for k, v in (result.get("post_mortem") or {}).items() if k != "summary"},
        "min_success": job["spec"].get("minSuccess"),
        "volcano_tasks": tasks,
        "svc_configmap_bytes": svc_bytes,
        "result_tasks": result.get("tasks"),
        "result_restart_causes": [r.get("cause") for r in result.get("restarts") or []],
        "result_stalled": result.get("stalled"),
        "seconds_submit_to_all_created": round(phases.get("all pods created", float("nan")), 1),
        "seconds_submit_to_all_running": round(all_running, 1),
        "seconds_all_running_to_completed": round(completed - all_running, 1),
        "step_seconds": round(finished, 1),
        "step_peak_rss_mb": step_peak,
        "step_cpu_seconds": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "step_api_requests": len(step),
        "step_api_requests_per_pod": round(len(step) / pods, 3),
        "step_api_requests_by_verb_resource": by_kind,
        "step_api_requests_by_verb_resource_per_1000_pods": {k: round(v * per_1000, 1) for k, v in by_kind.items()},
        "phases_seen": {k: round(v, 1) for k, v in phases.items()},
        "step_stderr_tail": stderr[-3000:],
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
    parser.add_argument("--stall", action="store_true", help="the large job's coordinator names three stalled "
                        f"workers ({STALLED}) once it runs: --on-stall restart restarts it once (its log served by "
                        f"kwok in namespace {behaviour.LOGS_NAMESPACE})")
    parser.add_argument("--on-stall", choices=("restart", "warn"), default="restart",
                        help="with --stall: the step restarts the job once, or names the stall on the job and lets "
                        "it go on (the coordinator then reports it cleared)")
    parser.add_argument("--step-timeout", type=int, default=1800, help="the large job's step --timeout: one that "
                        "times out (saving the record, aborting the job) is measured as well, and the steps after "
                        "training run on the aborted job")
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument("--run-for", type=int, default=10, help="seconds each worker runs")
    parser.add_argument("--volcano-qps", type=float, default=50.0, help="Volcano controller's --kube-api-qps")
    parser.add_argument("--volcano-burst", type=int, default=100, help="Volcano controller's --kube-api-burst")
    parser.add_argument("--volcano-workers", type=int, default=3, help="Volcano controller's --worker-threads")
    parser.add_argument("--volcano-controller", choices=("stock", "patched"), default="stock",
                        help="Volcano's controller-manager as released, or with tests/cluster/patches/' job-controller "
                        "patch (requests without the pod merge in its queue: tests/cluster/volcano_patch.py)")
    args = parser.parse_args()

    bin_dir = build.build(log=lambda m: print(m, file=sys.stderr))
    binaries = ({"vc-controller-manager": volcano_patch.build(log=lambda m: print(m, file=sys.stderr))}
                if args.volcano_controller == "patched" else {})
    shape = NodeShape(count=args.nodes, cpu="64", memory="256Gi", gpus=0, pods=1000)
    volcano = (f"--kube-api-qps={args.volcano_qps}", f"--kube-api-burst={args.volcano_burst}",
               f"--worker-threads={args.volcano_workers}")
    with tempfile.TemporaryDirectory(prefix="vpipe-bench-") as tmp:
        started = time.monotonic()
        with ControlPlane(state_dir=Path(tmp), bin_dir=bin_dir, binaries=binaries, nodes=shape,
                          volcano_controller_args=volcano, log=lambda m: print(m, file=sys.stderr)) as plane:
            startup = time.monotonic() - started
            runs = []
            if args.small_workers:
                runs.append(run_job(plane, "bench-small", "small", 1, args.small_workers, args.run_for))
            run_id = f"bench-{args.name}"
            namespace = behaviour.LOGS_NAMESPACE if args.stall else "bench-large"
            runs.append(run_job(plane, namespace, args.name, args.ps, args.workers, args.run_for, args.chief,
                                run_id=run_id, stall=args.stall, timeout=args.step_timeout, on_stall=args.on_stall))
            after = after_training(plane, namespace, args.name, run_id, Path(tmp) / "state")
    report = {"nodes": args.nodes, "volcano_controller": list(volcano), "volcano_controller_build": args.volcano_controller,
              "control_plane_startup_seconds": round(startup, 1), "runs": runs, "after_training": after}
    print(json.dumps(report, indent=2))
    print(f"{'pods':>6} {'->all created s':>15} {'->all Running s':>15} {'->Completed s':>13} {'step s':>7} {'peak RSS MB':>11} "
          f"{'CPU s':>6} {'API req':>7} {'req/pod':>7}", file=sys.stderr)
    for run in runs:
        print(f"{run['pods']:>6} {run['seconds_submit_to_all_created']:>15} {run['seconds_submit_to_all_running']:>15} {run['seconds_all_running_to_completed']:>13} "
              f"{run['step_seconds']:>7} {run['step_peak_rss_mb']:>11} {run['step_cpu_seconds']:>6} "
              f"{run['step_api_requests']:>7} {run['step_api_requests_per_pod']:>7}", file=sys.stderr)
    print(f"\nafter training, the job of {runs[-1]['pods']} pods:", file=sys.stderr)
    print(f"{'step':<40} {'exit':>4} {'s':>6} {'peak RSS MB':>11} {'CPU s':>6} {'API req':>7} {'lines':>5}", file=sys.stderr)
    for step in after:
        print(f"{step['step']:<40} {step['exit_code']:>4} {step['seconds']:>6} {step['peak_rss_mb']:>11} "
              f"{step['cpu_seconds']:>6} {step['api_requests']:>7} {step['stdout_lines']:>5}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
