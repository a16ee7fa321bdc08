"""Validation of job specs before any API call. Clusters without Volcano's admission webhook
accept what the webhook would reject, so these rules cover the webhook's too. Each failure
raises InputError naming the field (the spec path), the value and what is allowed."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from volcano_pipelines.errors import InputError
from volcano_pipelines.volcano.spec import (
    CodeSource,
    JobOptions,
    MPIJobSpec,
    Resources,
    Role,
    Storage,
    TFJobSpec,
)

DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
# Kubernetes resource.Quantity, non-negative: digits, optional fraction, suffix or exponent.
QUANTITY = re.compile(r"^\+?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?$")
SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# Set by the builders; a user value would silently break the entry-point contract.
RESERVED_ENV_PREFIXES = ("VPIPE_", "VK_")
RESERVED_ENV_NAMES = frozenset({"TF_CONFIG"})
RESERVED_MOUNTS = ("/vpipe", "/etc/volcano", "/root/.ssh")
MAX_HOSTNAME = 63
TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
TOLERATION_OPERATORS = frozenset({"Exists", "Equal"})
TOLERATION_EFFECTS = frozenset({"", "NoSchedule", "PreferNoSchedule", "NoExecute"})


def _fail(field: str, value: Any, allowed: str) -> None:
    raise InputError(field, value, allowed)


def check_dns_label(field: str, value: str, *, must_start_with_letter: bool = False) -> None:
    pattern = DNS1035_LABEL if must_start_with_letter else DNS1123_LABEL
    if not isinstance(value, str) or len(value) > 63 or not pattern.match(value):
        first = "a lowercase letter" if must_start_with_letter else "a lowercase letter or digit"
        _fail(field, value, f"at most 63 characters of lowercase letters, digits and '-', starting with {first} and ending with a letter or digit")


def check_dns_subdomain(field: str, value: str) -> None:
    if not isinstance(value, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
        _fail(field, value, "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', at most 253 characters, starting and ending with a letter or digit")


def check_label_key(field: str, key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        _fail(field, key, "a label key prefix must be a DNS-1123 subdomain")
    if len(name) > 63 or not LABEL_NAME.match(name):
        _fail(field, key, "a label key name of at most 63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit")


def check_label_value(field: str, value: str) -> None:
    if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
        _fail(field, value, "a label value: at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or empty)")


def check_labels(field: str, labels: Mapping[str, str]) -> None:
    for key, value in labels.items():
        check_label_key(f"{field}[{key!r}]", key)
        check_label_value(f"{field}[{key!r}]", value)


def check_annotations(field: str, annotations: Mapping[str, str]) -> None:
    for key, value in annotations.items():
        check_label_key(f"{field}[{key!r}]", key)
        check_process_string(f"{field}[{key!r}]", value)


def check_process_string(field: str, value: str) -> None:
    """Anything may reach a process verbatim except NUL, which no argv or environ can carry."""
    if not isinstance(value, str):
        _fail(field, value, "a string")
    if "\x00" in value:
        _fail(field, value, "any text without NUL characters (a process cannot receive them)")


def check_positive(field: str, value: Any, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        _fail(field, value, "an integer >= 0" if allow_zero else "an integer >= 1")


def check_positive_seconds(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        _fail(field, value, "a number of seconds > 0")


def check_quantity(field: str, value: str | None) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not QUANTITY.match(value):
        _fail(field, value, "a Kubernetes quantity such as 500m, 2, 1.5, 4Gi or 512Mi (non-negative)")


def check_http_url(field: str, value: str) -> None:
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        _fail(field, value, "an http:// or https:// URL with a host")
    if any(ch.isspace() or ord(ch) < 32 for ch in value):
        _fail(field, value, "a URL without whitespace or control characters")


def check_absolute_path(field: str, value: str) -> None:
    check_process_string(field, value)
    if not value.startswith("/") or value.rstrip("/") == "":
        _fail(field, value, "an absolute path other than '/'")
    if any(part == ".." for part in value.split("/")):
        _fail(field, value, "a path without '..' components")


def check_relative_path(field: str, value: str) -> None:
    check_process_string(field, value)
    if not value or value.startswith("/") or any(part == ".." for part in value.split("/")):
        _fail(field, value, "a non-empty relative path without '..' components")


def check_image(field: str, value: str | None) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value or any(ch.isspace() or ord(ch) < 32 for ch in value):
        _fail(field, value, "a container image reference without whitespace, e.g. registry/name:tag")


def check_env(field: str, env: Mapping[str, str]) -> None:
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            _fail(f"{field} name", name, "an environment variable name: letters, digits, '_', '.', '-', not starting with a digit")
        if name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES):
            _fail(f"{field} name", name, "a name other than TF_CONFIG, VK_* and VPIPE_* (set by volcano-pipelines)")
        check_process_string(f"{field}[{name}]", value)


def check_tolerations(field: str, tolerations: Iterable[Mapping[str, Any]]) -> None:
    for i, toleration in enumerate(tolerations):
        where = f"{field}[{i}]"
        if not isinstance(toleration, Mapping):
            _fail(where, toleration, "a mapping with key, operator, value, effect, tolerationSeconds")
        unknown = set(toleration) - TOLERATION_KEYS
        if unknown:
            _fail(where, sorted(unknown), f"keys among {sorted(TOLERATION_KEYS)}")
        if toleration.get("operator", "Equal") not in TOLERATION_OPERATORS:
            _fail(f"{where}.operator", toleration.get("operator"), "Exists or Equal")
        if toleration.get("effect", "") not in TOLERATION_EFFECTS:
            _fail(f"{where}.effect", toleration.get("effect"), "NoSchedule, PreferNoSchedule, NoExecute or empty")


def check_resources(field: str, resources: Resources) -> None:
    check_quantity(f"{field}.cpu", resources.cpu)
    check_quantity(f"{field}.memory", resources.memory)
    check_positive(f"{field}.gpu", resources.gpu, allow_zero=True)


def check_role(field: str, role: Role, *, min_replicas: int = 1) -> None:
    if not isinstance(role.replicas, int) or isinstance(role.replicas, bool) or role.replicas < min_replicas:
        _fail(f"{field}.replicas", role.replicas, f"an integer >= {min_replicas}")
    check_image(f"{field}.image", role.image)
    check_resources(f"{field}.resources", role.resources)
    check_env(f"{field}.env", role.env)
    check_labels(f"{field}.node_selector", role.node_selector)
    check_tolerations(f"{field}.tolerations", role.tolerations)
    check_labels(f"{field}.labels", role.labels)
    check_annotations(f"{field}.annotations", role.annotations)


def check_code(code: CodeSource) -> None:
    if code.url is not None and code.path is not None:
        _fail("code.url", code.url, "either code.url or code.path, not both")
    if code.url is not None:
        check_http_url("code.url", code.url)
    if code.sha256 is not None:
        if not isinstance(code.sha256, str) or not SHA256.match(code.sha256):
            _fail("code.sha256", code.sha256, "64 hexadecimal characters (a SHA-256 digest)")
        if code.url is None or code.url.endswith("/"):
            _fail("code.sha256", code.sha256, "only with a code.url naming one file or archive (not a directory ending in '/')")
    if code.path is not None:
        check_absolute_path("code.path", code.path)
    if code.pvc is not None:
        check_dns_subdomain("code.pvc", code.pvc)
        if code.path is None:
            _fail("code.pvc", code.pvc, "only together with code.path (the directory on that PVC)")
    check_relative_path("code.entry", code.entry)


def check_storage(storage: Storage) -> None:
    for field, pvc in (("storage.data_pvc", storage.data_pvc), ("storage.log_pvc", storage.log_pvc)):
        if pvc is not None:
            check_dns_subdomain(field, pvc)
    for field, path in (("storage.data_dir", storage.data_dir), ("storage.log_dir", storage.log_dir)):
        check_absolute_path(field, path)
        if any(path == m or path.startswith(m + "/") for m in RESERVED_MOUNTS):
            _fail(field, path, f"a path outside {', '.join(RESERVED_MOUNTS)} (used by volcano-pipelines and Volcano)")
    if storage.data_dir.rstrip("/") == storage.log_dir.rstrip("/"):
        _fail("storage.log_dir", storage.log_dir, "a directory different from storage.data_dir")


def check_job_options(job: JobOptions, task_replicas: Mapping[str, int], *, always_needed: int) -> None:
    """`always_needed`: pods the job cannot start without (parameter servers, chief, MPI
    master) — a smaller gang would start a job that can never make progress."""
    check_dns_label("job.name", job.name, must_start_with_letter=True)
    # Volcano's svc plugin makes every pod's hostname <job>-<task>-<index>: it must fit a DNS label.
    longest = max((f"{job.name}-{task}-{max(n - 1, 0)}" for task, n in task_replicas.items()), key=len, default=job.name)
    if len(longest) > MAX_HOSTNAME:
        room = MAX_HOSTNAME - (len(longest) - len(job.name))
        _fail("job.name", job.name, f"at most {room} characters, so that pod hostname {longest!r} fits {MAX_HOSTNAME}")
    check_dns_label("job.namespace", job.namespace)
    check_image("job.image", job.image)
    check_dns_subdomain("job.queue", job.queue)
    if job.priority_class is not None:
        check_dns_subdomain("job.priority_class", job.priority_class)
    total = sum(task_replicas.values())
    if job.min_available is not None:
        check_positive("job.min_available", job.min_available)
        if not always_needed < job.min_available <= total:
            _fail("job.min_available", job.min_available,
                  f"an integer between {always_needed + 1} (every parameter server / chief / master plus one worker) "
                  f"and the total number of replicas ({total})")
    # Volcano's webhook turns maxRetry 0 into 3: 0 would mean different things on different clusters.
    if not isinstance(job.max_retry, int) or isinstance(job.max_retry, bool) or job.max_retry < 1:
        _fail("job.max_retry", job.max_retry, "an integer >= 1 (to fail at the first failed pod, turn off restart on pod failure)")
    if job.ttl_seconds_after_finished is not None:
        check_positive("job.ttl_seconds_after_finished", job.ttl_seconds_after_finished, allow_zero=True)
    for i, secret in enumerate(job.image_pull_secrets):
        check_dns_subdomain(f"job.image_pull_secrets[{i}]", secret)
    if job.service_account is not None:
        check_dns_subdomain("job.service_account", job.service_account)
    if job.run_id is not None:
        check_label_value("job.run_id", job.run_id)
        if not job.run_id:
            _fail("job.run_id", job.run_id, "a non-empty label value")
    check_labels("job.labels", job.labels)


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
            _fail("chief.replicas", spec.chief.replicas, "exactly 1 (TensorFlow has one chief)")
    if spec.evaluator is not None:
        check_role("evaluator", spec.evaluator)
        if spec.evaluator.replicas != 1:
            _fail("evaluator.replicas", spec.evaluator.replicas, "exactly 1 (TensorFlow has one evaluator)")
    replicas = tf_task_replicas(spec)
    check_job_options(spec.job, replicas, always_needed=replicas["ps"] + replicas.get("chief", 0))
    check_code(spec.code)
    check_storage(spec.storage)
    for i, arg in enumerate(spec.args):
        check_process_string(f"args[{i}]", arg)
    if not isinstance(spec.port, int) or not 1 <= spec.port <= 65535:
        _fail("port", spec.port, "a TCP port between 1 and 65535")


def validate_mpi(spec: MPIJobSpec) -> None:
    check_role("mpimaster", spec.master)
    if spec.master.replicas != 1:
        _fail("mpimaster.replicas", spec.master.replicas, "exactly 1")
    check_role("mpiworker", spec.worker)
    check_job_options(spec.job, {"mpimaster": 1, "mpiworker": spec.worker.replicas}, always_needed=1)
    check_code(spec.code)
    check_storage(spec.storage)
    if not spec.command:
        _fail("command", list(spec.command), "a non-empty program and arguments for mpiexec to run")
    for i, arg in enumerate(spec.command):
        check_process_string(f"command[{i}]", arg)
    for i, arg in enumerate(spec.mpiexec_args):
        check_process_string(f"mpiexec_args[{i}]", arg)
    check_positive("slots_per_worker", spec.slots_per_worker)


def parse_toleration(raw: str) -> dict[str, Any]:
    """kubectl's taint form `KEY[=VALUE]:EFFECT` -> a toleration (Equal with a value, Exists
    without)."""
    if not isinstance(raw, str):
        _fail("toleration", raw, "KEY[=VALUE]:EFFECT, e.g. gpu=true:NoSchedule or dedicated:NoExecute")
    spec, sep, effect = raw.rpartition(":")
    if not sep or not spec:
        _fail("toleration", raw, "KEY[=VALUE]:EFFECT, e.g. gpu=true:NoSchedule or dedicated:NoExecute")
    key, eq, value = spec.partition("=")
    if eq:
        return {"key": key, "operator": "Equal", "value": value, "effect": effect}
    return {"key": key, "operator": "Exists", "effect": effect}
