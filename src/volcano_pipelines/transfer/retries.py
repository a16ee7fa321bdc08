"""Which source errors are worth another try, and the retry loop with backoff: one line of
each error (no Java stack trace) for logs and reports."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from volcano_pipelines import backoff

__all__ = ["TRANSIENT_REMOTE", "http_status", "is_transient", "short_error", "with_retries"]

log = logging.getLogger(__name__)
T = TypeVar("T")


# Java exceptions a NameNode sends back that mean "try again": restarting / failing over
# (safe mode, standby), overloaded, or retriable by contract.
TRANSIENT_REMOTE = (
    "SafeModeException",
    "RetriableException",
    "StandbyException",
    "ObserverRetryOnActiveException",
    "ServerTooBusyException",
    "ConnectException",
    "EOFException",
    "SocketTimeoutException",
    "BlockMissingException",
    # hdfs-native's own read errors: every replica failed (e.g. the file was replaced
    # while being read and its old blocks deleted) or a checksum did not match.
    "DataTransferError",
    "ChecksumError",
)


def short_error(err: BaseException, limit: int = 300) -> str:
    """One line, no Java stack trace: safe for logs and reports."""
    text = f"{type(err).__name__}: {err}".replace("\\n", "\n")
    line = text.split("\n", 1)[0].strip()
    return line if len(line) <= limit else line[: limit - 3] + "..."


def http_status(err: BaseException) -> int | None:
    """The HTTP status of an error that carries its answer (requests' HTTPError), else None."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(err: BaseException) -> bool:
    if isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    # An answer that cannot be read (HTML, other JSON: requests' JSONDecodeError is an OSError
    # too) or a 4xx other than "too many / too slow" is the same on every attempt.
    if isinstance(err, (ValueError, KeyError, TypeError)):
        return False
    status = http_status(err)
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return False
    if isinstance(err, RuntimeError):  # hdfs-native: RPCError("<java class>", "<message>")
        text = str(err)
        return any(name in text for name in TRANSIENT_REMOTE)
    if isinstance(err, (ConnectionError, TimeoutError, socket.timeout)):
        return True
    if isinstance(err, OSError):
        return True  # hdfs-native maps RPC / DataNode failures to OSError
    name = type(err).__name__
    return name in ("ConnectionError", "ChunkedEncodingError", "ReadTimeout", "ConnectTimeout")


def with_retries(
    what: str,
    fn: Callable[[], T],
    *,
    attempts: int = 8,
    base_delay: float = 0.5,
    max_delay: float = 8.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `fn`; on a transient error wait (exponential backoff with jitter) and retry."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as err:
            if attempt == attempts or not is_transient(err):
                raise
            delay = backoff.delay(attempt, base_delay, max_delay, jitter=True)
            log.warning("%s failed (%s); retry %d/%d in %.1fs", what, short_error(err), attempt, attempts - 1, delay)
            sleep(delay)
    raise AssertionError("unreachable")
