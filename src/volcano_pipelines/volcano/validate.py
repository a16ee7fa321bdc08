"""Validation of job specs before any API call. Clusters without Volcano's admission webhook
accept what the webhook would reject, so these rules cover the webhook's too. Each failure
raises InputError naming the field (the spec path), the value and what is allowed. The
rules for single Kubernetes values live in objects/validate.py."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from decimal import Decimal

from volcano_pipelines.objects.validate import (
    ENV_NAME,
    fail,
    check_absolute_path,
    check_annotations,
    check_bounded,
    check_dns_label,
    check_dns_subdomain,
    check_exec_string,
    check_http_url,
    check_image,
    check_label_value,
    check_labels,
    check_user_labels,
    owner_reference,
    check_positive,
    check_quantity,
    check_relative_path,
    check_tolerations,
)
from volcano_pipelines.volcano.slices import check_plugin_objects, most_replicas, plan_slices
from volcano_pipelines.volcano.spec import (
    POD_SECURITY_LEVELS,
    CodeSource,
    JobOptions,
    MPIJobSpec,
    Resources,
    Role,
    Storage,
    TFJobSpec,
)

log = logging.getLogger(__name__)
# Requests this small are legal but almost surely a typo (512 instead of 512Mi): warn.
SMALL_CPU = Decimal("0.01")  # 10m
SMALL_MEMORY = Decimal(32 * 1024**2)  # 32Mi
SHA256 = re.compile(r"[0-9a-fA-F]{64}")
# Set by the builders; a user value would silently break the entry-point contract.
RESERVED_ENV_PREFIXES = ("VPIPE_", "VK_")
RESERVED_ENV_NAMES = frozenset({"TF_CONFIG"})
RESERVED_MOUNTS = ("/vpipe", "/etc/volcano", "/root/.ssh")
MAX_HOSTNAME = 63
# Volcano names each pod <job>-<task>-<index>, and its svc plugin makes that the pod's hostname,
# a DNS label. One limit for every job name, whatever its tasks and replicas, so that a name
# accepted once is never refused for having more workers: room for the longest task name
# (evaluator, mpimaster, mpiworker) as a slice (`-s9`: the plugins' 1 MiB objects allow at most
# five slices of a role, volcano/slices.py) and a five-digit index (a slice's host list, at least
# 9 bytes a host within one 128 KiB environment string, stays under 100,000 replicas).
MAX_JOB_NAME = MAX_HOSTNAME - len("-mpiworker-s9-99999")
INT32_MAX = 2**31 - 1  # Volcano keeps maxRetry and ttlSecondsAfterFinished as int32

# More mpiexec slots per worker than any node has cores is a typo, not a plan.
MAX_SLOTS_PER_WORKER = 1024


def check_job_ref(namespace: str, name: str) -> None:
    """A job named by a user (`vpipe status NAME -n NAMESPACE`): both end up in the API path,
    so an empty or odd value would request another URL (the list of all jobs, `namespaces//`).
    Volcano job names, like namespaces, are DNS-1123 labels."""
    check_dns_label("namespace", namespace)
    check_dns_label("job", name)


def check_env(field: str, env: Mapping[str, str]) -> None:
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            fail(f"{field} name", name, "an environment variable name: letters, digits, '_', '.', '-', not starting with a digit")
        if name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES):
            fail(f"{field} name", name, "a name other than TF_CONFIG, VK_* and VPIPE_* (set by volcano-pipelines)")
        check_exec_string(f"{field}[{name}]", value, env_name=name)


def check_resources(field: str, resources: Resources) -> None:
    check_quantity(f"{field}.cpu", resources.cpu, small=SMALL_CPU, small_text="10m (0.01 CPU)")
    check_quantity(f"{field}.memory", resources.memory, small=SMALL_MEMORY, small_text="32Mi")
    check_positive(f"{field}.gpu", resources.gpu, allow_zero=True)


def check_role(field: str, role: Role) -> None:
    # First: every later step allocates in proportion to the replicas.
    if not isinstance(role.replicas, int) or isinstance(role.replicas, bool) or role.replicas < 1:
        fail(f"{field}.replicas", role.replicas, "an integer >= 1")
    check_image(f"{field}.image", role.image)
    check_resources(f"{field}.resources", role.resources)
    check_env(f"{field}.env", role.env)
    check_labels(f"{field}.node_selector", role.node_selector)
    check_tolerations(f"{field}.tolerations", role.tolerations)
    check_user_labels(f"{field}.labels", role.labels)
    check_annotations(f"{field}.annotations", role.annotations)


def check_code(code: CodeSource) -> None:
    if code.url is not None and code.path is not None:
        fail("code.url", code.url, "either code.url or code.path, not both")
    if code.url is not None:
        check_http_url("code.url", code.url)
    if code.sha256 is not None:
        if not isinstance(code.sha256, str) or not SHA256.fullmatch(code.sha256):
            fail("code.sha256", code.sha256, "64 hexadecimal characters (a SHA-256 digest)")
        if code.url is None or code.url.endswith("/"):
            fail("code.sha256", code.sha256, "only with a code.url naming one file or archive (not a directory ending in '/')")
    if code.path is not None:
        check_absolute_path("code.path", code.path)
    if code.pvc is not None:
        check_dns_subdomain("code.pvc", code.pvc)
        if code.path is None:
            fail("code.pvc", code.pvc, "only together with code.path (the directory on that PVC)")
    check_relative_path("code.entry", code.entry)


def check_storage(storage: Storage) -> None:
    for field, pvc in (("storage.data_pvc", storage.data_pvc), ("storage.log_pvc", storage.log_pvc)):
        if pvc is not None:
            check_dns_subdomain(field, pvc)
    for field, path in (("storage.data_dir", storage.data_dir), ("storage.log_dir", storage.log_dir)):
        check_absolute_path(field, path)
        if any(path == m or path.startswith(m + "/") for m in RESERVED_MOUNTS):
            fail(field, path, f"a path outside {', '.join(RESERVED_MOUNTS)} (used by volcano-pipelines and Volcano)")
    if storage.data_dir.rstrip("/") == storage.log_dir.rstrip("/"):
        fail("storage.log_dir", storage.log_dir, "a directory different from storage.data_dir")
    if storage.data_subpath is not None:
        check_relative_path("storage.data_subpath", storage.data_subpath)
        if storage.data_pvc is None:
            fail("storage.data_subpath", storage.data_subpath, "only together with data_pvc (a directory on that PVC)")


def check_job_options(job: JobOptions, task_replicas: Mapping[str, int], *, always_needed: int) -> None:
    """`always_needed`: pods the job cannot start without (parameter servers, chief, MPI
    master) — a smaller gang would start a job that can never make progress."""
    total = sum(task_replicas.values())
    check_dns_label("job.name", job.name, must_start_with_letter=True, max_length=MAX_JOB_NAME,
                    why=f" (Volcano names each pod <name>-<task>-<index>, a hostname of at most {MAX_HOSTNAME})")
    check_dns_label("job.namespace", job.namespace)
    check_image("job.image", job.image)
    check_dns_subdomain("job.queue", job.queue)
    if job.priority_class is not None:
        check_dns_subdomain("job.priority_class", job.priority_class)
    if job.min_available is not None:
        check_positive("job.min_available", job.min_available)
        if not always_needed < job.min_available <= total:
            fail("job.min_available", job.min_available,
                  f"an integer between {always_needed + 1} (every parameter server / chief / master plus one worker) "
                  f"and the total number of replicas ({total})")
    # Volcano's webhook turns maxRetry 0 into 3: 0 would mean different things on different clusters.
    if not isinstance(job.max_retry, int) or isinstance(job.max_retry, bool) or not 1 <= job.max_retry <= INT32_MAX:
        fail("job.max_retry", job.max_retry, f"an integer from 1 to {INT32_MAX} (to fail at the first failed pod, "
             "turn off restart on pod failure)")
    if job.ttl is not None:
        # Volcano stores both as int32: a larger value would be refused or wrap around.
        check_bounded("job.ttl", job.ttl, 0, INT32_MAX)
    if job.deadline is not None:
        check_positive("job.deadline", job.deadline)
    for i, secret in enumerate(job.image_pull_secrets or ()):
        check_dns_subdomain(f"job.image_pull_secrets[{i}]", secret)
    if job.service_account is not None:
        check_dns_subdomain("job.service_account", job.service_account)
    if job.run_id is not None:
        check_label_value("job.run_id", job.run_id)
        if not job.run_id:
            fail("job.run_id", job.run_id, "a non-empty label value")
    check_user_labels("job.labels", job.labels or {})
    if job.pod_security not in POD_SECURITY_LEVELS:
        fail("job.pod_security", job.pod_security, f"one of {', '.join(POD_SECURITY_LEVELS)}")
    if job.owner is not None:
        owner_reference("job.owner", job.owner)


def tf_task_replicas(spec: TFJobSpec) -> dict[str, int]:
    tasks = {"ps": spec.ps.replicas, "worker": spec.worker.replicas}
    if spec.chief is not None:
        tasks["chief"] = spec.chief.replicas
    if spec.evaluator is not None:
        tasks["evaluator"] = spec.evaluator.replicas
    return tasks


def validate_tf(spec: TFJobSpec) -> None:
    check_role("ps", spec.ps)
    check_role("worker", spec.worker)
    if spec.chief is not None:
        check_role("chief", spec.chief)
        if spec.chief.replicas != 1:
            fail("chief.replicas", spec.chief.replicas, "exactly 1 (TensorFlow has one chief)")
    if spec.evaluator is not None:
        check_role("evaluator", spec.evaluator)
        if spec.evaluator.replicas != 1:
            fail("evaluator.replicas", spec.evaluator.replicas, "exactly 1 (TensorFlow has one evaluator)")
    replicas = tf_task_replicas(spec)
    check_job_options(spec.job, replicas, always_needed=replicas["ps"] + replicas.get("chief", 0))
    check_tf_slices(spec.job.name, replicas)
    check_code(spec.code)
    check_storage(spec.storage)
    for i, arg in enumerate(spec.args):
        check_exec_string(f"args[{i}]", arg)
    if not isinstance(spec.port, int) or isinstance(spec.port, bool) or not 1 <= spec.port <= 65535:
        fail("port", spec.port, "a TCP port between 1 and 65535")


def check_tf_slices(job_name: str, replicas: Mapping[str, int]) -> None:
    """A role past one Volcano task's svc limit becomes several tasks (volcano/slices.py).
    Without a chief the workers complete the job, then by its minSuccess (every worker pod
    succeeded, volcano/tf.py): an evaluator, which succeeds too, would be counted as one."""
    # First: it bounds the replicas before any slice is planned.
    check_plugin_objects(job_name, replicas, max(replicas, key=lambda role: replicas[role]), ssh=False)
    split = len(plan_slices(job_name, "worker", replicas["worker"])) > 1
    if "chief" not in replicas and "evaluator" in replicas and split:
        fail("worker.replicas", replicas["worker"],
             f"at most {most_replicas(job_name, 'worker')} workers with an evaluator and no chief for job name "
             f"{job_name!r}: more are split over several Volcano tasks (Volcano's svc plugin gives every container "
             "one environment variable per task naming all its hosts, and Linux caps one at 128 KiB), and the job "
             "then completes when as many pods succeeded as there are workers, which the evaluator would count "
             "in; add a chief (--chief), whose completion ends the job")


def validate_mpi(spec: MPIJobSpec) -> None:
    check_role("mpimaster", spec.master)
    if spec.master.replicas != 1:
        fail("mpimaster.replicas", spec.master.replicas, "exactly 1")
    check_role("mpiworker", spec.worker)
    check_job_options(spec.job, {"mpimaster": 1, "mpiworker": spec.worker.replicas}, always_needed=1)
    check_plugin_objects(spec.job.name, {"mpimaster": 1, "mpiworker": spec.worker.replicas}, "mpiworker", ssh=True)
    if spec.job.pod_security != "baseline":
        fail("job.pod_security", spec.job.pod_security, "baseline for an MPI job: its workers run sshd, which needs "
             "root and capabilities the restricted level forbids")
    check_code(spec.code)
    check_storage(spec.storage)
    if not spec.command:
        fail("command", list(spec.command), "a non-empty program and arguments for mpiexec to run")
    for i, arg in enumerate(spec.command):
        check_exec_string(f"command[{i}]", arg)
    for i, arg in enumerate(spec.mpiexec_args):
        check_exec_string(f"mpiexec_args[{i}]", arg)
    check_bounded("slots_per_worker", spec.slots_per_worker, 1, MAX_SLOTS_PER_WORKER)
