"""The error types every step raises; the CLI maps each to one exit code (docs/design.md)."""

from __future__ import annotations

from typing import Any

__all__ = ["EXIT_BAD_INPUT", "EXIT_CLUSTER", "EXIT_FAILED", "EXIT_OK", "ClusterError", "InputError", "VpipeError", "WorkFailed"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_CLUSTER = 3


class VpipeError(Exception):
    """Base class: every error a step raises on purpose."""

    exit_code: int = EXIT_FAILED


class InputError(VpipeError, ValueError):
    """Bad input, detected before anything is created."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        # None is "not given" throughout the API: `invalid --dest-pvc=None` read as a value.
        super().__init__(f"missing {field}: {allowed}" if value is None else f"invalid {_shown(field, value)}: {allowed}")


def _shown(field: str, value: Any) -> str:
    """`field=value` as the user wrote it: a switch given on a command line (`--force-delete`,
    value True) is named alone, and a whole number parsed as a float (`--ttl 10`) shows as
    typed, not as `10.0`."""
    if field.startswith("-") and value is True:
        return field
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return f"{field}={int(value)!r}"
    return f"{field}={value!r}"


class WorkFailed(VpipeError):
    """The work ran and failed (job failed, copy verification failed, timeout)."""

    exit_code = EXIT_FAILED


class ClusterError(VpipeError):
    """The cluster (or a remote system) could not be reached or refused the request."""

    exit_code = EXIT_CLUSTER
