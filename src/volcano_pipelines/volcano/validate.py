"""Validation of job specs before any API call. Clusters without Volcano's admission webhook
accept what the webhook would reject, so these rules cover the webhook's too. Each failure
raises InputError naming the field (the spec path), the value and what is allowed; values
that are legal but probably a mistake (a 1m CPU request) are logged as warnings.

Every pattern is matched against the whole value (`fullmatch`): with `re.match` and a `$`
anchor, a trailing newline would pass."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn
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

log = logging.getLogger(__name__)

DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
# Kubernetes resource.Quantity, non-negative: digits, optional fraction, suffix or exponent.
QUANTITY = re.compile(r"(?P<number>\+?(\d+(\.\d*)?|\.\d+))(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?")
QUANTITY_MULTIPLIERS = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
    "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
    **{suffix: Decimal(1024) ** (i + 1) for i, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}
# Requests this small are legal but almost surely a typo (512 instead of 512Mi): warn.
SMALL_CPU = Decimal("0.01")  # 10m
SMALL_MEMORY = Decimal(32 * 1024**2)  # 32Mi
SHA256 = re.compile(r"[0-9a-fA-F]{64}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
# A container image reference (the distribution/reference grammar): [host[:port]/]path[:tag][@digest].
_IMAGE_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?"
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_IMAGE_DOMAIN}/)?{_IMAGE_PATH}(?:/{_IMAGE_PATH})*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?"
)
MAX_IMAGE_NAME = 255
# Set by the builders; a user value would silently break the entry-point contract.
RESERVED_ENV_PREFIXES = ("VPIPE_", "VK_")
RESERVED_ENV_NAMES = frozenset({"TF_CONFIG"})
RESERVED_MOUNTS = ("/vpipe", "/etc/volcano", "/root/.ssh")
MAX_HOSTNAME = 63
TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
TOLERATION_OPERATORS = frozenset({"Exists", "Equal"})
TOLERATION_EFFECTS = frozenset({"", "NoSchedule", "PreferNoSchedule", "NoExecute"})
TOLERATION_FORM = "KEY[=VALUE]:EFFECT with EFFECT NoSchedule, PreferNoSchedule or NoExecute, e.g. gpu=true:NoSchedule or dedicated:NoExecute"

# Size limits, checked before anything large is built.
# Volcano creates a job's pods one API call at a time and gang scheduling must place all of
# them at once: past a few thousand pods a job takes minutes to start and its rendered Job
# nears the API server's size limit. These bounds are far above TF/MPI training jobs and
# catch a typo (--workers 100000) before it renders megabytes.
MAX_TASK_REPLICAS = 1000
MAX_JOB_PODS = 2000
# More mpiexec slots per worker than any node has cores is a typo, not a plan.
MAX_SLOTS_PER_WORKER = 1024
# Linux refuses to start a process whose argument or `NAME=value` environment string is longer
# than MAX_ARG_STRLEN (32 pages: 128 KiB, terminating NUL included): the container would fail
# with "argument list too long". The total of all of them (ARG_MAX, a quarter of the 8 MiB
# default stack) stays far above what MAX_MANIFEST_BYTES lets through.
MAX_EXEC_STRING = 128 * 1024
# TF_CONFIG = {"cluster":<cluster>,"task":{"type":"<role>","index":<i>}}: the wrapper's bytes.
TF_CONFIG_WRAPPER = len('TF_CONFIG={"cluster":,"task":{"type":"evaluator","index":9999}}')
# Kubernetes' limit on one object's annotations (keys and values, in bytes).
MAX_ANNOTATIONS_BYTES = 256 * 1024
# etcd refuses requests over 1.5 MiB (its default --max-request-bytes), and the stored Job
# also carries the status and managed fields the server adds: leave room for them.
MAX_MANIFEST_BYTES = 1024 * 1024


def _fail(field: str, value: Any, allowed: str) -> NoReturn:
    raise InputError(field, value, allowed)


def _utf8_size(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def check_dns_label(field: str, value: str, *, must_start_with_letter: bool = False) -> None:
    pattern = DNS1035_LABEL if must_start_with_letter else DNS1123_LABEL
    if not isinstance(value, str) or len(value) > 63 or not pattern.fullmatch(value):
        first = "a lowercase letter" if must_start_with_letter else "a lowercase letter or digit"
        _fail(field, value, f"at most 63 characters of lowercase letters, digits and '-', starting with {first} and ending with a letter or digit")


def check_dns_subdomain(field: str, value: str) -> None:
    if not isinstance(value, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        _fail(field, value, "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', at most 253 characters, starting and ending with a letter or digit")


def check_job_ref(namespace: str, name: str) -> None:
    """A job named by a user (`vpipe status NAME -n NAMESPACE`): both end up in the API path,
    so an empty or odd value would request another URL (the list of all jobs, `namespaces//`).
    Volcano job names, like namespaces, are DNS-1123 labels."""
    check_dns_label("namespace", namespace)
    check_dns_label("job", name)


def check_label_key(field: str, key: str) -> None:
    """A Kubernetes qualified name: [DNS-1123 subdomain '/'] name."""
    if not isinstance(key, str):
        _fail(field, key, "a string")
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        _fail(field, key, "a label key prefix (before '/') must be a DNS-1123 subdomain")
    if len(name) > 63 or not LABEL_NAME.fullmatch(name):
        _fail(field, key, "a label key name of at most 63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit")


def check_label_value(field: str, value: str) -> None:
    if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        _fail(field, value, "a label value: at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or empty)")


def check_labels(field: str, labels: Mapping[str, str]) -> None:
    for key, value in labels.items():
        check_label_key(f"{field}[{key!r}]", key)
        check_label_value(f"{field}[{key!r}]", value)


def check_annotations(field: str, annotations: Mapping[str, str]) -> None:
    total = 0
    for key, value in annotations.items():
        check_label_key(f"{field}[{key!r}]", key)
        check_process_string(f"{field}[{key!r}]", value)
        total += _utf8_size(key) + _utf8_size(value)
    if total > MAX_ANNOTATIONS_BYTES:
        _fail(f"{field} size", total,
              f"at most {MAX_ANNOTATIONS_BYTES} bytes of annotation keys and values in total (Kubernetes' limit per object)")


def check_process_string(field: str, value: str) -> None:
    """Anything may reach a process verbatim except NUL, which no argv or environ can carry,
    and lone surrogates (from undecodable bytes), which no encoding can carry."""
    if not isinstance(value, str):
        _fail(field, value, "a string")
    if "\x00" in value:
        _fail(field, value, "any text without NUL characters (a process cannot receive them)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        _fail(field, value, "valid text (it contains bytes that are not UTF-8)")


def check_exec_string(field: str, value: str, *, env_name: str | None = None) -> None:
    """An argument or environment value of the container's process: verbatim text within the
    kernel's per-string limit (for an environment variable, `NAME=value` counts)."""
    check_process_string(field, value)
    size = _utf8_size(value) + 1 + (_utf8_size(env_name) + 1 if env_name is not None else 0)
    if size > MAX_EXEC_STRING:
        what = "NAME=value" if env_name is not None else "an argument"
        _fail(f"{field} size", size,
              f"at most {MAX_EXEC_STRING} bytes for {what} including the final NUL "
              "(Linux refuses to start a process with a longer argument or environment string)")


def check_positive(field: str, value: Any, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        _fail(field, value, "an integer >= 0" if allow_zero else "an integer >= 1")


def check_bounded(field: str, value: Any, low: int, high: int) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if not ok:
        _fail(field, value, f"an integer between {low} and {high}")


def check_positive_seconds(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        _fail(field, value, "a number of seconds > 0")


def parse_quantity(field: str, value: str) -> Decimal:
    """A Kubernetes quantity's numeric value (cores, bytes)."""
    match = QUANTITY.fullmatch(value) if isinstance(value, str) else None
    amount: Decimal | None = None
    if match is not None:
        suffix = match["suffix"] or ""
        try:
            if suffix[:1] in ("e", "E"):
                amount = Decimal(value)  # an exponent beyond Decimal's range (and Kubernetes') raises
            else:
                amount = Decimal(match["number"]) * QUANTITY_MULTIPLIERS[suffix]
        except InvalidOperation:
            amount = None
    if amount is None:
        _fail(field, value, "a Kubernetes quantity such as 500m, 2, 1.5, 4Gi or 512Mi (non-negative)")
    return amount


def check_quantity(field: str, value: str | None, *, small: Decimal | None = None, small_text: str = "") -> None:
    """None: no request. Zero is an error (a pod asking for nothing of a resource it needs);
    a value below `small` is logged as a warning."""
    if value is None:
        return
    amount = parse_quantity(field, value)
    if amount == 0:
        _fail(field, value, "a quantity greater than zero (omit it for the default)")
    if small is not None and amount < small:
        log.warning("%s=%r is below %s, too little for a training process: check the value and its unit",
                    field, value, small_text)


def _redacted_url(value: str) -> str:
    """The URL as errors show it: a password in its user-info replaced by '***'."""
    scheme, sep, rest = value.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return value
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{host}{slash}{path}"


def check_http_url(field: str, value: str) -> None:
    if not isinstance(value, str):
        _fail(field, value, "an http:// or https:// URL with a host")
    shown = _redacted_url(value)
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port  # .port raises for a port that is not a number in 0..65535
    except ValueError:
        _fail(field, shown, "an http:// or https:// URL with a valid host (IPv6 addresses in [brackets]) and port")
    if parts.scheme not in ("http", "https") or not host:
        _fail(field, shown, "an http:// or https:// URL with a host")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        _fail(field, shown, "a URL without whitespace or control characters")
    if port == 0:
        _fail(field, shown, "a URL whose port, if any, is a number between 1 and 65535")
    if parts.username is not None:
        log.warning("%s carries credentials: they are sent as HTTP basic auth, and they are stored in the Job's "
                    "spec in plain text, readable by anyone who can read jobs in its namespace", field)


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
    match = IMAGE_REFERENCE.fullmatch(value) if isinstance(value, str) and len(value) <= 1024 else None
    if match is None or len(match["name"]) > MAX_IMAGE_NAME:
        _fail(field, value, "a container image reference: [REGISTRY[:PORT]/]NAME[:TAG][@DIGEST], e.g. tensorflow/tensorflow:2.16.1")


def check_env(field: str, env: Mapping[str, str]) -> None:
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            _fail(f"{field} name", name, "an environment variable name: letters, digits, '_', '.', '-', not starting with a digit")
        if name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES):
            _fail(f"{field} name", name, "a name other than TF_CONFIG, VK_* and VPIPE_* (set by volcano-pipelines)")
        check_exec_string(f"{field}[{name}]", value, env_name=name)


def check_toleration(field: str, toleration: Mapping[str, Any]) -> None:
    """Kubernetes' rules for one toleration."""
    if not isinstance(toleration, Mapping):
        _fail(field, toleration, "a mapping with key, operator, value, effect, tolerationSeconds")
    unknown = set(toleration) - TOLERATION_KEYS
    if unknown:
        _fail(field, sorted(unknown), f"keys among {sorted(TOLERATION_KEYS)}")
    key = toleration.get("key", "")
    operator = toleration.get("operator", "Equal")
    value = toleration.get("value", "")
    effect = toleration.get("effect", "")
    if not isinstance(operator, str) or operator not in TOLERATION_OPERATORS:
        _fail(f"{field}.operator", operator, "Exists or Equal")
    if key != "":
        check_label_key(f"{field}.key", key)
    elif operator != "Exists":
        _fail(f"{field}.key", key, "a key (only operator Exists may leave it empty, to tolerate every taint)")
    if operator == "Exists":
        if value != "":
            _fail(f"{field}.value", value, "no value with operator Exists")
    else:
        check_label_value(f"{field}.value", value)
    if not isinstance(effect, str) or effect not in TOLERATION_EFFECTS:
        _fail(f"{field}.effect", effect, "NoSchedule, PreferNoSchedule, NoExecute or empty (every effect)")
    if "tolerationSeconds" in toleration:
        seconds = toleration["tolerationSeconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            _fail(f"{field}.tolerationSeconds", seconds, "an integer number of seconds")
        if effect != "NoExecute":
            _fail(f"{field}.tolerationSeconds", seconds, "only with effect NoExecute")


def check_tolerations(field: str, tolerations: Iterable[Mapping[str, Any]]) -> None:
    for i, toleration in enumerate(tolerations):
        check_toleration(f"{field}[{i}]", toleration)


def parse_toleration(raw: str) -> dict[str, Any]:
    """`KEY[=VALUE]:EFFECT`, the form `kubectl taint` uses, to a toleration: operator Equal
    with a value, Exists without. Raises InputError with field "toleration"."""
    if not isinstance(raw, str):
        _fail("toleration", raw, TOLERATION_FORM)
    # Neither keys nor values may contain ':', so the last ':' is the effect's.
    spec, sep, effect = raw.rpartition(":")
    key, eq, value = spec.partition("=")
    if not sep or not key or not effect:
        _fail("toleration", raw, TOLERATION_FORM)
    toleration: dict[str, Any] = (
        {"key": key, "operator": "Equal", "value": value, "effect": effect} if eq
        else {"key": key, "operator": "Exists", "effect": effect}
    )
    try:
        check_toleration("toleration", toleration)
    except InputError as err:
        part = err.field.rpartition(".")[2]  # key, value or effect
        raise InputError("toleration", raw, f"{TOLERATION_FORM}; the {part} {err.value!r} is not valid: {err.allowed}") from None
    return toleration


def check_manifest_size(manifest: Mapping[str, Any]) -> None:
    """The rendered Job must fit what the API server (etcd) stores: check before sending."""
    size = _utf8_size(json.dumps(manifest, separators=(",", ":"), ensure_ascii=False))
    if size > MAX_MANIFEST_BYTES:
        _fail("manifest size", size,
              f"a rendered Job of at most {MAX_MANIFEST_BYTES} bytes of JSON (the API server refuses objects over "
              "about 1.5 MB): use fewer or shorter args, env values and annotations")


def check_tf_cluster_size(cluster_json: str, workers: int) -> None:
    """TF_CONFIG (the cluster spec listing every ps / worker / chief host) is one environment
    string of the training process: it must fit the kernel's per-string limit."""
    size = _utf8_size(cluster_json) + TF_CONFIG_WRAPPER + 1
    if size > MAX_EXEC_STRING:
        _fail("worker.replicas", workers,
              f"fewer ps / worker replicas or a shorter job name: TF_CONFIG lists every host ({size} bytes here) and "
              f"must fit {MAX_EXEC_STRING} bytes (Linux refuses to start a process with a longer environment string)")


def check_resources(field: str, resources: Resources) -> None:
    check_quantity(f"{field}.cpu", resources.cpu, small=SMALL_CPU, small_text="10m (0.01 CPU)")
    check_quantity(f"{field}.memory", resources.memory, small=SMALL_MEMORY, small_text="32Mi")
    check_positive(f"{field}.gpu", resources.gpu, allow_zero=True)


def check_role(field: str, role: Role) -> None:
    # First: every later step allocates in proportion to the replicas.
    if not isinstance(role.replicas, int) or isinstance(role.replicas, bool) or role.replicas < 1:
        _fail(f"{field}.replicas", role.replicas, "an integer >= 1")
    if role.replicas > MAX_TASK_REPLICAS:
        _fail(f"{field}.replicas", role.replicas,
              f"at most {MAX_TASK_REPLICAS} per task (a larger Volcano job is impractical to create and to gang-schedule)")
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
        if not isinstance(code.sha256, str) or not SHA256.fullmatch(code.sha256):
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


def check_job_options(job: JobOptions, task_replicas: Mapping[str, int], *, always_needed: int, scaled: str) -> None:
    """`always_needed`: pods the job cannot start without (parameter servers, chief, MPI
    master) — a smaller gang would start a job that can never make progress. `scaled`: the
    task users scale (workers), named when the job has too many pods in total."""
    total = sum(task_replicas.values())
    if total > MAX_JOB_PODS:
        _fail(f"{scaled}.replicas", task_replicas[scaled],
              f"at most {MAX_JOB_PODS} pods in the whole job (here {total}: "
              + ", ".join(f"{n} {task}" for task, n in task_replicas.items()) + ")")
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
    check_job_options(spec.job, replicas, always_needed=replicas["ps"] + replicas.get("chief", 0), scaled="worker")
    check_code(spec.code)
    check_storage(spec.storage)
    for i, arg in enumerate(spec.args):
        check_exec_string(f"args[{i}]", arg)
    if not isinstance(spec.port, int) or isinstance(spec.port, bool) or not 1 <= spec.port <= 65535:
        _fail("port", spec.port, "a TCP port between 1 and 65535")


def validate_mpi(spec: MPIJobSpec) -> None:
    check_role("mpimaster", spec.master)
    if spec.master.replicas != 1:
        _fail("mpimaster.replicas", spec.master.replicas, "exactly 1")
    check_role("mpiworker", spec.worker)
    check_job_options(spec.job, {"mpimaster": 1, "mpiworker": spec.worker.replicas}, always_needed=1, scaled="mpiworker")
    check_code(spec.code)
    check_storage(spec.storage)
    if not spec.command:
        _fail("command", list(spec.command), "a non-empty program and arguments for mpiexec to run")
    for i, arg in enumerate(spec.command):
        check_exec_string(f"command[{i}]", arg)
    for i, arg in enumerate(spec.mpiexec_args):
        check_exec_string(f"mpiexec_args[{i}]", arg)
    check_bounded("slots_per_worker", spec.slots_per_worker, 1, MAX_SLOTS_PER_WORKER)
