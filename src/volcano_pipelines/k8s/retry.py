"""The one retry policy for API calls: transient failures (a restarting API server, 429/5xx,
a dropped connection) are retried with the one capped exponential backoff (backoff.py); everything else is raised
at once as a typed error. The sleep is injectable so tests never wait for real."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from kubernetes.client.rest import ApiException

from volcano_pipelines import backoff
from volcano_pipelines.k8s.errors import from_exception, is_connection_refused, is_timeout, is_tls_mismatch, is_transient

__all__ = ["RetryPolicy", "call"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6  # ~15 s of backoff in all: an API server restart fits in it
    first_delay: float = 0.5
    max_delay: float = 10.0
    # Nothing listens at the address, or something accepted and did not answer within the
    # request timeout: one retry, then the error (a wrong server address should not take 16 s
    # to report, a silent server not minutes).
    refused_attempts: int = 2

    def delays(self) -> Iterator[float]:
        return backoff.delays(self.first_delay, self.max_delay)


def call(
    action: str,
    fn: Callable[[], T],
    *,
    host: str = "",
    policy: RetryPolicy = RetryPolicy(),
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run one API call under the policy; the error raised names `action`."""
    delays = policy.delays()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as err:
            if not isinstance(err, ApiException) and not is_transient(err):
                raise  # not an answer from the API server (a bug, or a signal from `fn`): not ours to wrap
            refused = is_connection_refused(err)
            limit = policy.refused_attempts if refused or is_timeout(err) else policy.attempts
            if not is_transient(err) or is_tls_mismatch(err) or attempt >= limit:
                raise from_exception(err, action, host) from err
            delay = next(delays)
            (log.debug if refused else log.warning)("API server not answering while trying to %s (%s); retrying in %.1fs", action, _short(err), delay)
            sleep(delay)


def _short(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:200]
