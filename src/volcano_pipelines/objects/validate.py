"""Kubernetes' own rules for values (names, labels, quantities, images, tolerations, URLs,
paths, sizes), checked before any API call; shared by every builder. Each failure raises
InputError naming the field, the value and what is allowed; values that are legal but
probably a mistake are logged as warnings.

Every pattern is matched against the whole value (`fullmatch`): with `re.match` and a `$`
anchor, a trailing newline would pass."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn
from urllib.parse import urlsplit

from volcano_pipelines.errors import InputError

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
TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
TOLERATION_OPERATORS = frozenset({"Exists", "Equal"})
TOLERATION_EFFECTS = frozenset({"", "NoSchedule", "PreferNoSchedule", "NoExecute"})
TOLERATION_FORM = "KEY[=VALUE]:EFFECT with EFFECT NoSchedule, PreferNoSchedule or NoExecute, e.g. gpu=true:NoSchedule or dedicated:NoExecute"
# Linux refuses to start a process whose argument or `NAME=value` environment string is longer
# than MAX_ARG_STRLEN (32 pages: 128 KiB, terminating NUL included): the container would fail
# with "argument list too long". The total of all of them (ARG_MAX, a quarter of the 8 MiB
# default stack) stays far above what MAX_MANIFEST_BYTES lets through.
MAX_EXEC_STRING = 128 * 1024
# Kubernetes' limit on one object's annotations (keys and values, in bytes).
MAX_ANNOTATIONS_BYTES = 256 * 1024
# etcd refuses requests over 1.5 MiB (its default --max-request-bytes), and the stored Job
# also carries the status and managed fields the server adds: leave room for them.
MAX_MANIFEST_BYTES = 1024 * 1024


def fail(field: str, value: Any, allowed: str) -> NoReturn:
    raise InputError(field, value, allowed)


def utf8_size(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def check_dns_label(field: str, value: str, *, must_start_with_letter: bool = False, max_length: int = 63,
                    why: str = "") -> None:
    """A DNS label; `max_length` below 63 where something is appended to the value (`why` says what)."""
    pattern = DNS1035_LABEL if must_start_with_letter else DNS1123_LABEL
    if not isinstance(value, str) or len(value) > max_length or not pattern.fullmatch(value):
        first = "a lowercase letter" if must_start_with_letter else "a lowercase letter or digit"
        fail(field, value, f"at most {max_length} characters of lowercase letters, digits and '-', starting with {first} "
                           f"and ending with a letter or digit{why}")


def check_dns_subdomain(field: str, value: str) -> None:
    if not isinstance(value, str) or len(value) > 253 or not DNS1123_SUBDOMAIN.fullmatch(value):
        fail(field, value, "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', at most 253 characters, starting and ending with a letter or digit")


def check_label_key(field: str, key: str) -> None:
    """A Kubernetes qualified name: [DNS-1123 subdomain '/'] name."""
    if not isinstance(key, str):
        fail(field, key, "a string")
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        fail(field, key, "a label key prefix (before '/') must be a DNS-1123 subdomain")
    if len(name) > 63 or not LABEL_NAME.fullmatch(name):
        fail(field, key, "a label key name of at most 63 characters: letters, digits, '-', '_' and '.', starting and ending with a letter or digit")


def check_label_value(field: str, value: str) -> None:
    if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        fail(field, value, "a label value: at most 63 characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit (or empty)")


def check_labels(field: str, labels: Mapping[str, str]) -> None:
    for key, value in labels.items():
        check_label_key(f"{field}[{key!r}]", key)
        check_label_value(f"{field}[{key!r}]", value)


def check_user_labels(field: str, labels: Mapping[str, str]) -> None:
    """Labels a user adds: valid, and not one of the identity labels this package sets (a
    `managed-by=evil` or a foreign run id would hide the object from reap, re-attach and
    clean-up, or claim someone else's)."""
    from volcano_pipelines.labels import MANAGED_BY_LABEL, RUN_LABEL, STEP_LABEL

    check_labels(field, labels)
    for key in labels:
        # Exactly the identity labels: other volcano-pipelines/ labels are the user's to give
        # (volcano-pipelines/reap=true opts an object into the reap sweeper, manifests/sweeper).
        if key in (MANAGED_BY_LABEL, RUN_LABEL, STEP_LABEL):
            fail(f"{field}[{key!r}]", f"{key}={labels[key]}", f"a label other than {MANAGED_BY_LABEL}, {RUN_LABEL} and "
                 f"{STEP_LABEL}, which volcano-pipelines sets itself (the run id comes from --run-id)")


def check_annotations(field: str, annotations: Mapping[str, str]) -> None:
    total = 0
    for key, value in annotations.items():
        check_label_key(f"{field}[{key!r}]", key)
        check_process_string(f"{field}[{key!r}]", value)
        total += utf8_size(key) + utf8_size(value)
    if total > MAX_ANNOTATIONS_BYTES:
        fail(f"{field} size", total,
              f"at most {MAX_ANNOTATIONS_BYTES} bytes of annotation keys and values in total (Kubernetes' limit per object)")


def check_process_string(field: str, value: str) -> None:
    """Anything may reach a process verbatim except NUL, which no argv or environ can carry,
    and lone surrogates (from undecodable bytes), which no encoding can carry."""
    if not isinstance(value, str):
        fail(field, value, "a string")
    if "\x00" in value:
        fail(field, value, "any text without NUL characters (a process cannot receive them)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        fail(field, value, "valid text (it contains bytes that are not UTF-8)")


def check_exec_string(field: str, value: str, *, env_name: str | None = None) -> None:
    """An argument or environment value of the container's process: verbatim text within the
    kernel's per-string limit (for an environment variable, `NAME=value` counts)."""
    check_process_string(field, value)
    size = utf8_size(value) + 1 + (utf8_size(env_name) + 1 if env_name is not None else 0)
    if size > MAX_EXEC_STRING:
        what = "NAME=value" if env_name is not None else "an argument"
        fail(f"{field} size", size,
              f"at most {MAX_EXEC_STRING} bytes for {what} including the final NUL "
              "(Linux refuses to start a process with a longer argument or environment string)")


def check_positive(field: str, value: Any, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        fail(field, value, "an integer >= 0" if allow_zero else "an integer >= 1")


def check_bounded(field: str, value: Any, low: int, high: int) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if not ok:
        fail(field, value, f"an integer between {low} and {high}")


# The most seconds any duration may be: what Kubernetes and Volcano store as int32 (about
# 68 years). More (1e12, 1e400 = inf) overflows a date or a timer instead of meaning anything.
MAX_SECONDS = 2**31 - 1


def check_positive_seconds(field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        fail(field, value, f"a number of seconds > 0 and at most {MAX_SECONDS}")


# The largest amount Kubernetes can schedule: it counts CPU in thousandths (MilliValue) as int64.
MAX_QUANTITY = Decimal(2**63 - 1) / 1000


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
        fail(field, value, "a Kubernetes quantity such as 500m, 2, 1.5, 4Gi or 512Mi (non-negative)")
    return amount


def check_quantity(field: str, value: str | None, *, small: Decimal | None = None, small_text: str = "") -> None:
    """None: no request. Zero is an error (a pod asking for nothing of a resource it needs);
    a value below `small` is logged as a warning."""
    if value is None:
        return
    amount = parse_quantity(field, value)
    if amount == 0:
        fail(field, value, "a quantity greater than zero (omit it for the default)")
    if amount > MAX_QUANTITY:  # 1e400 is a valid number, but no scheduler can count it
        fail(field, value, f"a quantity of at most {MAX_QUANTITY:.3e} (Kubernetes counts thousandths in 64 bits)")
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
        fail(field, value, "an http:// or https:// URL with a host")
    shown = _redacted_url(value)
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port  # .port raises for a port that is not a number in 0..65535
    except ValueError:
        fail(field, shown, "an http:// or https:// URL with a valid host (IPv6 addresses in [brackets]) and port")
    if parts.scheme not in ("http", "https") or not host:
        fail(field, shown, "an http:// or https:// URL with a host")
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        fail(field, shown, "a URL without whitespace or control characters")
    if port == 0:
        fail(field, shown, "a URL whose port, if any, is a number between 1 and 65535")
    if parts.username is not None:
        log.warning("%s carries credentials: they are sent as HTTP basic auth, and they are stored in the Job's "
                    "spec in plain text, readable by anyone who can read jobs in its namespace", field)


def check_absolute_path(field: str, value: str) -> None:
    check_process_string(field, value)
    if not value.startswith("/") or value.rstrip("/") == "":
        fail(field, value, "an absolute path other than '/'")
    if any(part == ".." for part in value.split("/")):
        fail(field, value, "a path without '..' components")


def check_relative_path(field: str, value: str) -> None:
    check_process_string(field, value)
    if not value or value.startswith("/") or any(part == ".." for part in value.split("/")):
        fail(field, value, "a non-empty relative path without '..' components")


def check_image(field: str, value: str | None) -> None:
    if value is None:
        return
    match = IMAGE_REFERENCE.fullmatch(value) if isinstance(value, str) and len(value) <= 1024 else None
    if match is None or len(match["name"]) > MAX_IMAGE_NAME:
        fail(field, value, "a container image reference: [REGISTRY[:PORT]/]NAME[:TAG][@DIGEST], e.g. tensorflow/tensorflow:2.16.1")


def check_toleration(field: str, toleration: Mapping[str, Any]) -> None:
    """Kubernetes' rules for one toleration."""
    if not isinstance(toleration, Mapping):
        fail(field, toleration, "a mapping with key, operator, value, effect, tolerationSeconds")
    unknown = set(toleration) - TOLERATION_KEYS
    if unknown:
        fail(field, sorted(unknown), f"keys among {sorted(TOLERATION_KEYS)}")
    key = toleration.get("key", "")
    operator = toleration.get("operator", "Equal")
    value = toleration.get("value", "")
    effect = toleration.get("effect", "")
    if not isinstance(operator, str) or operator not in TOLERATION_OPERATORS:
        fail(f"{field}.operator", operator, "Exists or Equal")
    if key != "":
        check_label_key(f"{field}.key", key)
    elif operator != "Exists":
        fail(f"{field}.key", key, "a key (only operator Exists may leave it empty, to tolerate every taint)")
    if operator == "Exists":
        if value != "":
            fail(f"{field}.value", value, "no value with operator Exists")
    else:
        check_label_value(f"{field}.value", value)
    if not isinstance(effect, str) or effect not in TOLERATION_EFFECTS:
        fail(f"{field}.effect", effect, "NoSchedule, PreferNoSchedule, NoExecute or empty (every effect)")
    if "tolerationSeconds" in toleration:
        seconds = toleration["tolerationSeconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            fail(f"{field}.tolerationSeconds", seconds, "an integer number of seconds")
        if effect != "NoExecute":
            fail(f"{field}.tolerationSeconds", seconds, "only with effect NoExecute")


def check_tolerations(field: str, tolerations: Iterable[Mapping[str, Any]]) -> None:
    for i, toleration in enumerate(tolerations):
        check_toleration(f"{field}[{i}]", toleration)


def parse_toleration(raw: str) -> dict[str, Any]:
    """`KEY[=VALUE]:EFFECT`, the form `kubectl taint` uses, to a toleration: operator Equal
    with a value, Exists without. Raises InputError with field "toleration"."""
    if not isinstance(raw, str):
        fail("toleration", raw, TOLERATION_FORM)
    # Neither keys nor values may contain ':', so the last ':' is the effect's.
    spec, sep, effect = raw.rpartition(":")
    key, eq, value = spec.partition("=")
    if not sep or not key or not effect:
        fail("toleration", raw, TOLERATION_FORM)
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


def checked_placement(node_selector: Mapping[str, str] | None,
                      tolerations: Sequence[str] | None) -> tuple[dict[str, str], tuple[dict[str, Any], ...]]:
    """A step's pod placement inputs, checked: the node selector and the parsed tolerations
    (an InputError names `node_selector` or `tolerations`). Serve and tensorboard take them as
    their Placement group, sync as fields of its copy-pod options."""
    check_labels("node_selector", node_selector or {})
    return dict(node_selector or {}), tuple(parse_tolerations("tolerations", tolerations or []))


def parse_tolerations(field: str, raw: Any) -> list[dict[str, Any]]:
    """A list of `KEY[=VALUE]:EFFECT` strings to tolerations; errors name `field`."""
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        fail(field, raw, "a list of KEY[=VALUE]:EFFECT strings")
    parsed = []
    for item in raw:
        try:
            parsed.append(parse_toleration(item))
        except InputError as err:
            raise InputError(field, err.value, err.allowed) from None
    return parsed


OWNER_FORM = "API_VERSION/KIND/NAME/UID, e.g. argoproj.io/v1alpha1/Workflow/nightly-x7k2p/0f9c2c1e-..."
_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
_API_VERSION = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9]+((alpha|beta)[0-9]+)?")
_UID = re.compile(r"[A-Za-z0-9-]{1,128}")


def owner_reference(field: str, raw: str) -> dict[str, Any]:
    """`API_VERSION/KIND/NAME/UID` to an ownerReference. Not the controller (the owner is not
    what reconciles the object) and blockOwnerDeletion false: deleting the owner deletes the
    object in the background, and whoever creates it needs no update right on the owner's
    finalizers (the OwnerReferencesPermissionEnforcement admission plugin asks for that only
    with blockOwnerDeletion true)."""
    if not isinstance(raw, str):
        fail(field, raw, OWNER_FORM)
    parts = raw.rsplit("/", 3)
    if len(parts) != 4:
        fail(field, raw, OWNER_FORM)
    api_version, kind, name, uid = parts
    if not _API_VERSION.fullmatch(api_version) or not _KIND.fullmatch(kind) or not _UID.fullmatch(uid):
        fail(field, raw, OWNER_FORM)
    check_dns_subdomain(field, name)
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": False,
            "blockOwnerDeletion": False}


def check_manifest_size(manifest: Mapping[str, Any]) -> None:
    """The rendered Job must fit what the API server (etcd) stores: check before sending."""
    size = utf8_size(json.dumps(manifest, separators=(",", ":"), ensure_ascii=False))
    if size > MAX_MANIFEST_BYTES:
        fail("manifest size", size,
              f"a rendered Job of at most {MAX_MANIFEST_BYTES} bytes of JSON (the API server refuses objects over "
              "about 1.5 MB): use fewer or shorter args, env values and annotations")
