"""The step API: one flat function per step; every front end (CLI, KFP, Argo, Python) calls
these and nothing else. `from volcano_pipelines.steps import train_tf` loads only the module
of that step (`vpipe render` must not pay for the sync engine or the Kubernetes client)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from volcano_pipelines.steps import registry

# Exported besides the steps and their results: what front ends need (choices, defaults, the
# sync step's errors and progress hooks, the admin helpers).
_SUPPORT = {
    "BACKENDS": "_train", "ON_CANCEL_CHOICES": "_train", "MPI_TASKS": "_train_spec", "TF_TASKS": "_train_spec",
    "ON_FAILURE_CHOICES": "_reap", "SERVICE_TYPES": "_tensorboard", "TARGETS": "_serve",
    "DEFAULT_MAX_DELETE": "_sync", "DEFAULT_TRANSFERS": "_sync", "DEFAULT_DURABILITY": "_sync",
    "DEFAULT_STREAMS": "_sync", "DURABILITY_MODES": "_sync", "DeletionRefused": "_sync", "SyncFailed": "_sync",
    "SyncInterrupted": "_sync", "TransferProgress": "_sync", "display_path": "_sync", "quoted_path": "_sync",
    "sync_report": "_sync", "threads_left_behind": "_sync",
    "namespace_prepare": "_admin", "pv_reuse": "_admin", "kfp_pod": "_identity", "owner_in": "_identity", "POST_MORTEM_DIR_ENV": "_restarts",
    "target_namespace": "_train", "Connection": "_job_params", "CopyPodOptions": "_sync",
    "ObjectLabels": "_service_groups",
    "Placement": "_service_groups",
}
# Each name's module: the steps' from the one list of steps (steps/registry.py). No module is
# named like a function it exports: importing the module sets the package attribute of that
# name, which would hide the function.
_HOMES = {**registry.exports(), **_SUPPORT}
__all__ = sorted(_HOMES)

if TYPE_CHECKING:  # static types for `from volcano_pipelines.steps import ...` (test_registry keeps it equal to _HOMES)
    from volcano_pipelines.steps._admin import (
        namespace_prepare as namespace_prepare,
        pv_reuse as pv_reuse,
    )
    from volcano_pipelines.steps._finish import (
        finish_run as finish_run,
        RunReport as RunReport,
    )
    from volcano_pipelines.steps._job_params import (
        Connection as Connection,
    )
    from volcano_pipelines.steps._identity import (
        kfp_pod as kfp_pod,
        owner_in as owner_in,
    )
    from volcano_pipelines.steps._reap import (
        ON_FAILURE_CHOICES as ON_FAILURE_CHOICES,
        reap as reap,
        ReapResult as ReapResult,
    )
    from volcano_pipelines.steps._restarts import (
        POST_MORTEM_DIR_ENV as POST_MORTEM_DIR_ENV,
    )
    from volcano_pipelines.steps._service_groups import (
        ObjectLabels as ObjectLabels,
        Placement as Placement,
    )
    from volcano_pipelines.steps._results import (
        TrainResult as TrainResult,
    )
    from volcano_pipelines.steps._serve import (
        serve as serve,
        ServeResult as ServeResult,
        TARGETS as TARGETS,
    )
    from volcano_pipelines.steps._sync import (
        CopyPodOptions as CopyPodOptions,
        DEFAULT_DURABILITY as DEFAULT_DURABILITY,
        DEFAULT_MAX_DELETE as DEFAULT_MAX_DELETE,
        DEFAULT_STREAMS as DEFAULT_STREAMS,
        DEFAULT_TRANSFERS as DEFAULT_TRANSFERS,
        DURABILITY_MODES as DURABILITY_MODES,
        DeletionRefused as DeletionRefused,
        display_path as display_path,
        quoted_path as quoted_path,
        sync as sync,
        SyncFailed as SyncFailed,
        SyncInterrupted as SyncInterrupted,
        SyncResult as SyncResult,
        sync_report as sync_report,
        threads_left_behind as threads_left_behind,
        TransferProgress as TransferProgress,
    )
    from volcano_pipelines.steps._tensorboard import (
        SERVICE_TYPES as SERVICE_TYPES,
        tensorboard as tensorboard,
        TensorboardResult as TensorboardResult,
    )
    from volcano_pipelines.steps._train import (
        BACKENDS as BACKENDS,
        ON_CANCEL_CHOICES as ON_CANCEL_CHOICES,
        render_mpi as render_mpi,
        render_tf as render_tf,
        status as status,
        target_namespace as target_namespace,
        train_mpi as train_mpi,
        train_tf as train_tf,
    )
    from volcano_pipelines.steps._train_spec import (
        MPI_TASKS as MPI_TASKS,
        TF_TASKS as TF_TASKS,
    )


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
