"""The step API: one flat function per step; every front end (CLI, KFP, Argo, Python) calls
these and nothing else. `from volcano_pipelines.steps import train_tf` loads only the module
of that step (`vpipe render` must not pay for the sync engine or the Kubernetes client)."""

from __future__ import annotations

import importlib
from typing import Any

from volcano_pipelines.steps import registry

# Each name's module, from the one list of steps (steps/registry.py). No module is named like
# a function it exports: importing the module sets the package attribute of that name, which
# would hide the function.
# Also exported: what front ends need besides the steps (choices, defaults, the sync step's
# errors and progress hooks, the admin helpers).
_SUPPORT = {
    "BACKENDS": "_train", "ON_CANCEL_CHOICES": "_train", "MPI_TASKS": "_train_spec", "TF_TASKS": "_train_spec",
    "ON_FAILURE_CHOICES": "_reap", "SERVICE_TYPES": "_tensorboard", "TARGETS": "_serve",
    "DEFAULT_MAX_DELETE": "_sync", "DEFAULT_TRANSFERS": "_sync", "DeletionRefused": "_sync", "SyncFailed": "_sync",
    "SyncInterrupted": "_sync", "TransferProgress": "_sync", "display_path": "_sync", "quoted_path": "_sync",
    "namespace_prepare": "_admin", "pv_reuse": "_admin",
}
_HOMES = {**registry.exports(), **_SUPPORT}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
