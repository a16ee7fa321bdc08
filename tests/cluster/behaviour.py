"""How fake pods behave on the local control plane, and the labels tests use to choose.

kwok plays these rules (``tests/cluster/stages/pod.yaml``); keep the two in sync. No
container runs: a pod's "exit" is a status kwok writes.

* Every pod bound to a fake node goes Running about a second after binding.
* Pods of Volcano tasks named in ``COMPLETING_TASKS`` (label ``volcano.sh/task-spec``) exit 0
  ``DEFAULT_RUN_FOR`` after they start; other tasks (ps, mpiworker, ...) keep running, like
  real parameter servers, until something deletes them.
* ``FAIL_LABEL: "<code>"`` makes a pod exit with that code (phase Failed, reason ``Error``).
* ``KEEP_RUNNING_LABEL: "true"`` keeps a completing task running forever.
* ``RUN_FOR_LABEL: "<duration>"`` (e.g. ``"30s"``) changes how long a pod runs before it
  completes or fails.
* Deleted pods disappear about 0.2 s after deletion (no kubelet grace period).
* Pods in the namespace ``LOGS_NAMESPACE`` have a log: every container's is the file
  ``ControlPlane.task_log`` (CRI format: ``write_log_lines``), which a test writes; the API
  server reads it through kwok as through a kubelet (pods/log, tail and since included).
  Elsewhere a fake pod has no log.

Labels rather than annotations, because ``vpipe train --pod-label`` sets labels.
"""

from __future__ import annotations

TASK_SPEC_LABEL = "volcano.sh/task-spec"  # set by Volcano's job controller on every pod
# Workers past one Volcano task's limit are several tasks, worker-s1 .. worker-s9 (volcano/slices.py).
COMPLETING_TASKS = ("worker", *(f"worker-s{k}" for k in range(1, 10)), "chief", "mpimaster")

FAIL_LABEL = "vpipe.test/fail-exit-code"
FAIL_REASON = "Error"  # containerStatuses[].state.terminated.reason of a failed pod
KEEP_RUNNING_LABEL = "vpipe.test/keep-running"
RUN_FOR_LABEL = "vpipe.test/run-for"

DEFAULT_RUN_FOR_SECONDS = 3.0  # completing tasks
DEFAULT_FAIL_AFTER_SECONDS = 2.0  # pods with FAIL_LABEL


def fail_with(exit_code: int) -> dict[str, str]:
    """Labels that make a pod fail with ``exit_code``."""
    return {FAIL_LABEL: str(exit_code)}


def keep_running() -> dict[str, str]:
    """Labels that keep a pod Running until it is deleted."""
    return {KEEP_RUNNING_LABEL: "true"}


def run_for(seconds: int) -> dict[str, str]:
    """Labels that make a completing (or failing) pod run ``seconds`` first."""
    return {RUN_FOR_LABEL: f"{seconds}s"}


# Pods whose log kwok serves from ControlPlane.task_log (tests/cluster/launcher.py).
LOGS_NAMESPACE = "kwok-logs"


def cri_log_lines(lines: list[str], at: float) -> str:
    """`lines` as a container runtime writes a log file (what kwok reads, as the kubelet does):
    `<RFC 3339 nano> stdout F <text>`, each stamped `at` (Unix seconds)."""
    from datetime import datetime, timezone

    stamp = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    return "".join(f"{stamp} stdout F {line}\n" for line in lines)
