"""The step API: one flat function per step; every front end (CLI, KFP, Argo, Python) calls
these and nothing else. Importing them is cheap: the Kubernetes client, the HDFS clients and
TensorFlow are loaded only by the steps that use them, when they run."""

from __future__ import annotations

from volcano_pipelines.steps.finish import RunReport, finish_run
from volcano_pipelines.steps.results import TrainResult
from volcano_pipelines.steps.sync import SyncResult, sync
from volcano_pipelines.steps.train import render_mpi, render_tf, status, train_mpi, train_tf

__all__ = [
    "RunReport",
    "SyncResult",
    "TrainResult",
    "finish_run",
    "render_mpi",
    "render_tf",
    "status",
    "sync",
    "train_mpi",
    "train_tf",
]
