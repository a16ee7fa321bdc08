"""The step API: one flat function per step; every front end (CLI, KFP, Argo, Python) calls
these and nothing else. Imported lazily so that `render` never loads the sync engine or the
Kubernetes client."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SyncResult", "TrainResult", "render_mpi", "render_tf", "status", "sync", "train_mpi", "train_tf"]

_HOMES = {
    "sync": "volcano_pipelines.steps.sync",
    "SyncResult": "volcano_pipelines.steps.sync",
    "TrainResult": "volcano_pipelines.steps.results",
    "render_tf": "volcano_pipelines.steps.train",
    "render_mpi": "volcano_pipelines.steps.train",
    "train_tf": "volcano_pipelines.steps.train",
    "train_mpi": "volcano_pipelines.steps.train",
    "status": "volcano_pipelines.steps.train",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(name)
