"""Typed errors for what the API server answered. Callers branch on the type, never on the
message; the CLI maps each to its exit code through `errors.VpipeError.exit_code`."""

from __future__ import annotations

import json
import ssl

import urllib3
from kubernetes.client.rest import ApiException

from volcano_pipelines.errors import EXIT_BAD_INPUT, ClusterError

__all__ = [
    "BadAnswer",
    "Conflict",
    "Forbidden",
    "Invalid",
    "KubeError",
    "NotFound",
    "Unavailable",
    "from_exception",
    "is_connection_refused",
    "is_tls_mismatch",
    "is_timeout",
    "is_transient",
]

# Answers that mean "not right now": a restarting API server, throttling, a gateway.
TRANSIENT_STATUS = frozenset({0, 429, 500, 502, 503, 504})
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    urllib3.exceptions.HTTPError,  # MaxRetryError, ProtocolError, ReadTimeoutError, ...
    ConnectionError,
    TimeoutError,
)


class KubeError(ClusterError):
    """The API server refused or could not be asked. `status` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, *, status: int = 0, action: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.action = action


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Forbidden(KubeError):
    """401 / 403: the credentials may not do this (RBAC)."""


class Invalid(KubeError):
    """422: the API server rejected the object; the input was wrong, nothing was created."""

    exit_code = EXIT_BAD_INPUT


class Unavailable(KubeError):
    """No answer (connection refused, timeouts) or a transient status after the last retry."""


class BadAnswer(KubeError):
    """The server answered, but not as a Kubernetes API server does (HTML from a proxy or a
    login page, unrelated JSON, binary): the kubeconfig points at something else. Not retried:
    asking again gets the same answer."""


class OutOfTime(Unavailable):
    """The step's own time limit ran out while a request was on its way."""


def is_transient(err: BaseException) -> bool:
    if isinstance(err, ApiException):
        return err.status in TRANSIENT_STATUS
    return isinstance(err, TRANSIENT_ERRORS)


def is_timeout(err: BaseException) -> bool:
    """The server accepted the connection and did not answer in time: a restarting server
    refuses instead, so a second long wait would only delay the error."""
    return isinstance(err, (urllib3.exceptions.TimeoutError, TimeoutError)) or isinstance(
        getattr(err, "reason", None), (urllib3.exceptions.TimeoutError, TimeoutError))


def is_connection_refused(err: BaseException) -> bool:
    """Nothing listens at the address: retrying for long only delays the error."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return True
        reason = getattr(current, "reason", None)
        current = reason if isinstance(reason, BaseException) else current.__cause__ or current.__context__
    return "Connection refused" in str(err)


def _chain(err: BaseException) -> list[BaseException]:
    """`err` and what it wraps (urllib3's `reason`, `__cause__`, `__context__`), each once."""
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and all(current is not other for other in seen):
        seen.append(current)
        reason = getattr(current, "reason", None)
        current = reason if isinstance(reason, BaseException) else current.__cause__ or current.__context__
    return seen


# OpenSSL's words for "the other side does not speak TLS" (an https:// address at a plain-HTTP
# port): asking again gets the same answer.
_NOT_TLS = ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure", "packet length too long",
            "unknown protocol")


def is_tls_mismatch(err: BaseException) -> bool:
    """The TLS handshake failed for good: a certificate that does not verify, or a server that
    does not speak TLS at all. Not retried (a handshake cut short by a restart is: EOF)."""
    for part in _chain(err):
        if isinstance(part, ssl.SSLCertVerificationError):
            return True
        if isinstance(part, (ssl.SSLError, urllib3.exceptions.SSLError)) and any(w in str(part) for w in _NOT_TLS):
            return True
    return False


def _tls_message(err: BaseException, where: str, action: str) -> str:
    if any(isinstance(part, ssl.SSLCertVerificationError) for part in _chain(err)):
        reason = next(str(p.verify_message) for p in _chain(err) if isinstance(p, ssl.SSLCertVerificationError))
        return (f"the Kubernetes API server{where} presented a certificate that does not verify ({reason}) while "
                f"trying to {action}: check the kubeconfig's certificate-authority")
    return (f"the server{where} does not speak TLS (a plain-HTTP port behind an https:// address?) while trying to "
            f"{action}: check the kubeconfig's server address")


def api_message(err: ApiException) -> str:
    try:
        body = json.loads(err.body or "{}")
        return str(body.get("message") or err.reason)
    except (ValueError, TypeError, AttributeError):
        return str(err.reason)


def from_exception(err: BaseException, action: str, host: str = "") -> KubeError:
    """One clear sentence, and the right type, for what went wrong while doing `action`."""
    where = f" at {host}" if host else ""
    if isinstance(err, KubeError):
        return err
    if isinstance(err, ApiException) and err.status:
        detail = api_message(err)
        status = err.status
        if status in (401, 403):
            return Forbidden(f"permission denied to {action}{where} (HTTP {status}): {detail}", status=status, action=action)
        if status == 404:
            return NotFound(f"not found while trying to {action}{where}: {detail}", status=status, action=action)
        if status == 409:
            return Conflict(f"conflict while trying to {action}{where}: {detail}", status=status, action=action)
        if status == 422:
            return Invalid(f"the API server rejected the object while trying to {action}: {detail}", status=status, action=action)
        if status in TRANSIENT_STATUS:
            return Unavailable(f"the API server{where} did not answer while trying to {action} (HTTP {status}): {detail}",
                               status=status, action=action)
        return KubeError(f"cannot {action}{where} (HTTP {status}): {detail}", status=status, action=action)
    if is_tls_mismatch(err):
        return BadAnswer(_tls_message(err, where, action), action=action)
    if is_connection_refused(err):
        return Unavailable(f"cannot reach the Kubernetes API server{where} to {action}: connection refused", action=action)
    if is_timeout(err):
        return Unavailable(f"the Kubernetes API server{where} did not answer in time while trying to {action} "
                           f"(it accepted the connection; is it the right address, and is it overloaded?): "
                           f"{_short(err)}", action=action)
    return Unavailable(f"cannot reach the Kubernetes API server{where} to {action}: {err}", action=action)


def _short(err: BaseException) -> str:
    """urllib3 nests the cause (MaxRetryError(reason=ReadTimeoutError(...))): its own words."""
    reason = getattr(err, "reason", None)
    return str(reason if isinstance(reason, BaseException) else err).splitlines()[0][:300]
