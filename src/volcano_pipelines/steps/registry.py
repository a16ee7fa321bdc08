"""The one list of steps. Each step is declared here once: its function and the module it
lives in, its result type, the `vpipe` words that run it, a one-line summary and the front
ends it appears in. `volcano_pipelines.steps` exports what this lists; the KFP components,
the Argo templates and the CLI's step commands are read from it (a drift test checks that
no front end keeps a list of its own). A step's output parameters are marked on its result
type (`OUTPUTS`, outputs.py). Imports only the task names: step modules load when asked for."""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.outputs import WHOLE, Output, output_type
from volcano_pipelines.volcano.spec import MPI_TASKS, TF_TASKS

__all__ = ["ARGO", "CLI", "KFP", "STEPS", "WHOLE", "Output", "Step", "exports", "output_type", "step", "steps_for"]

CLI, KFP, ARGO = "cli", "kfp", "argo"
@dataclass(frozen=True)
class Step:
    name: str  # the function, exported by volcano_pipelines.steps
    module: str  # its module under volcano_pipelines.steps
    result: str | None  # its result type (exported too); None: a plain dict (render_*)
    words: tuple[str, ...]  # `vpipe` command words; () for none
    summary: str  # one line: what it does (the KFP component's description)
    front_ends: frozenset[str] = frozenset({CLI, KFP, ARGO})
    tasks: tuple[str, ...] = ()  # the task names its per-task settings are keyed by
    positional: tuple[str, ...] = ()  # parameters given as words on the command line (`vpipe sync SRC DST`)

    def function(self) -> Callable[..., Any]:
        return typing.cast(Callable[..., Any], getattr(importlib.import_module(self.home), self.name))

    def result_type(self) -> type:
        if self.result is None:
            raise TypeError(f"step {self.name} returns a plain dict")
        return typing.cast(type, getattr(importlib.import_module(self.home), self.result))

    def outputs(self) -> tuple[Output, ...]:
        """The output parameters its result type marks."""
        return tuple(getattr(self.result_type(), "OUTPUTS", ()))

    @property
    def home(self) -> str:
        return f"volcano_pipelines.steps.{self.module}"

    @property
    def short_help(self) -> str:
        """The summary's first sentence, as a command list shows it ("say hello to someone")."""
        return self.summary.split(". ")[0].rstrip(".").lower()

    @property
    def template(self) -> str:
        """The Argo template (and WorkflowTemplate suffix): the command words joined."""
        return "-".join(self.words)


_TRAIN_WAITS = "and wait for its end; the step fails with the reason when the job fails."
STEPS: tuple[Step, ...] = (
    Step("sync", "_sync", "SyncResult", ("sync",),
         "Stage a dataset (HDFS, WebHDFS, a directory, any fsspec URL) into a mounted directory: "
         "incremental, parallel, atomic, verified.", positional=("src", "dst")),
    Step("render_tf", "_train", None, ("render", "tf"),
         "The Volcano Job for distributed TensorFlow, as YAML; nothing is sent.", frozenset({CLI}), TF_TASKS),
    Step("render_mpi", "_train", None, ("render", "mpi"),
         "The Volcano Job for MPI, as YAML; nothing is sent.", frozenset({CLI}), MPI_TASKS),
    Step("train_tf", "_train", "TrainResult", ("train", "tf"),
         "Run distributed TensorFlow as a Volcano Job (parameter servers + workers, + chief, evaluator) "
         + _TRAIN_WAITS, tasks=TF_TASKS),
    Step("train_mpi", "_train", "TrainResult", ("train", "mpi"),
         "Run an MPI job as a Volcano Job (one mpimaster running mpiexec over N mpiworkers) " + _TRAIN_WAITS,
         tasks=MPI_TASKS),
    Step("status", "_train", "TrainResult", ("status",),
         "A training job's phase, per-task counts and (when it failed) the failing pod.", frozenset({CLI}),
         positional=("name",)),
    Step("finish_run", "_finish", "RunReport", (),
         "Exit handler: report how the run ended and what its training job did; when the run failed or was "
         "cancelled, clean up the run's training job per on_failure (a state that is not an end state, such as KFP's "
         "RUNNING, is decided from the job).", frozenset({KFP})),
    Step("reap", "_reap", "ReapResult", ("reap",),
         "Finish a training job whose parameter servers still run after the completion task succeeded "
         "(a CompleteJob Command after the grace period) and report how long they lingered; or sweep a selector.",
         positional=("job",)),
    Step("tensorboard", "_tensorboard", "TensorboardResult", ("tensorboard",),
         "Start (or update) TensorBoard over the training logs on the log PVC and report the URL to open; "
         "it lives as long as the training job, or for a TTL."),
    Step("serve", "_serve", "ServeResult", ("serve",),
         "Serve the exported model (<PVC>/export/<model>/<version>/) with TF Serving and wait until the "
         "version is AVAILABLE; roll back and fail when the rollout or the smoke test fails."),
)
# Exported by volcano_pipelines.steps besides the steps and their result types.
_ALSO = {"TrainResult": "_results"}


def step(name: str) -> Step:
    """The step declared under `name`."""
    for item in STEPS:
        if item.name == name:
            return item
    raise KeyError(name)


def steps_for(front_end: str) -> tuple[Step, ...]:
    return tuple(item for item in STEPS if front_end in item.front_ends)


def exports() -> dict[str, str]:
    """Every name volcano_pipelines.steps exports -> the module it lives in."""
    out = dict(_ALSO)
    for item in STEPS:
        out.setdefault(item.name, item.module)
        if item.result is not None:
            out.setdefault(item.result, item.module)
    return out
