"""The one list of steps. Each step is declared here once: its function and the module it
lives in, its result type, the `vpipe` words that run it, a summary, its one-line help and the
front ends it appears in. `volcano_pipelines.steps` exports what this lists; the KFP components,
the Argo templates and the CLI's step commands (the command list of `vpipe --help` included)
are read from it (a drift test checks that no front end keeps a list of its own). A step's output parameters are marked on its result
type (`OUTPUTS`, outputs.py). Imports only the task names: step modules load when asked for."""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.outputs import WHOLE, Output, output_type
from volcano_pipelines.volcano.tasks import MPI_TASKS, TF_TASKS

__all__ = ["ARGO", "CLI", "GROUPS", "KFP", "STEPS", "WHOLE", "Output", "Step", "exports", "output_type", "step", "steps_for"]

CLI, KFP, ARGO = "cli", "kfp", "argo"
@dataclass(frozen=True)
class Step:
    name: str  # the function, exported by volcano_pipelines.steps
    module: str  # its module under volcano_pipelines.steps
    result: str | None  # its result type (exported too); None: a plain dict (render_*)
    words: tuple[str, ...]  # `vpipe` command words; () for none
    summary: str  # what it does (the KFP component's description; the command's description)
    front_ends: frozenset[str] = frozenset({CLI, KFP, ARGO})
    tasks: tuple[str, ...] = ()  # the task names its per-task settings are keyed by
    positional: tuple[str, ...] = ()  # parameters given as words on the command line (`vpipe sync SRC DST`)
    # The one-line help of its command, wherever a command list shows it (`vpipe --help`, `vpipe
    # train --help`); empty: the summary's first sentence.
    help: str = ""
    # The cli/ module that fills in its command (its own usage, flags, output: `register_step`);
    # empty: the command is generated from this declaration (cli/generic.py).
    cli: str = ""

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
        """The one line a command list shows: `help`, or the summary's first sentence ("say
        hello to someone")."""
        if self.help:
            return self.help
        first = self.summary.split(". ")[0].rstrip(".")
        return first[:1].lower() + first[1:]

    @property
    def template(self) -> str:
        """The Argo template (and WorkflowTemplate suffix): the command words joined."""
        return "-".join(self.words)


_TRAIN_WAITS = "and wait for its end; the step fails with the reason when the job fails."
# The one-line help of each kind of training job, the same under `vpipe render` and `vpipe train`.
_TF_HELP = "distributed TensorFlow: parameter servers + workers (+ chief, evaluator)"
_MPI_HELP = "MPI: one mpimaster running mpiexec over N mpiworkers"
STEPS: tuple[Step, ...] = (
    Step("sync", "_sync", "SyncResult", ("sync",),
         "Stage a dataset (HDFS, WebHDFS, a directory, any fsspec URL) into a mounted directory: "
         "incremental, parallel, atomic, verified.", positional=("src", "dst"),
         help="stage a dataset from HDFS / WebHDFS / a directory into a mounted volume", cli="sync"),
    Step("render_tf", "_train", None, ("render", "tf"),
         "The Volcano Job for distributed TensorFlow, as YAML; nothing is sent.", frozenset({CLI}), TF_TASKS,
         help=_TF_HELP, cli="train"),
    Step("render_mpi", "_train", None, ("render", "mpi"),
         "The Volcano Job for MPI, as YAML; nothing is sent.", frozenset({CLI}), MPI_TASKS,
         help=_MPI_HELP, cli="train"),
    Step("train_tf", "_train", "TrainResult", ("train", "tf"),
         "Run distributed TensorFlow as a Volcano Job (parameter servers + workers, + chief, evaluator) "
         + _TRAIN_WAITS, tasks=TF_TASKS, help=_TF_HELP, cli="train"),
    Step("train_mpi", "_train", "TrainResult", ("train", "mpi"),
         "Run an MPI job as a Volcano Job (one mpimaster running mpiexec over N mpiworkers) " + _TRAIN_WAITS,
         tasks=MPI_TASKS, help=_MPI_HELP, cli="train"),
    Step("status", "_train", "TrainResult", ("status",),
         "A training job's phase, per-task counts and (when it failed) the failing pod.", frozenset({CLI}),
         positional=("name",), help="show a training job's phase and per-task counts", cli="train"),
    Step("finish_run", "_finish", "RunReport", (),
         "Exit handler: report how the run ended and what its training job did; when the run failed or was "
         "cancelled, clean up the run's training job per on_failure (a state that is not an end state, such as KFP's "
         "RUNNING, is decided from the job).", frozenset({KFP})),
    Step("reap", "_reap", "ReapResult", ("reap",),
         "Finish a training job whose parameter servers still run after the completion task succeeded "
         "(a CompleteJob Command after the grace period) and report how long they lingered; or sweep a selector.",
         positional=("job",), help="finish training jobs whose parameter servers outlive the completion task",
         cli="lifecycle"),
    Step("tensorboard", "_tensorboard", "TensorboardResult", ("tensorboard",),
         "Start (or update) TensorBoard over the training logs on the log PVC and report the URL to open; "
         "it lives as long as the training job, or for a TTL.",
         help="start TensorBoard over a job's logs and print its URL", cli="lifecycle"),
    Step("serve", "_serve", "ServeResult", ("serve",),
         "Serve the exported model (<PVC>/export/<model>/<version>/) with TF Serving and wait until the "
         "version is AVAILABLE; roll back and fail when the rollout or the smoke test fails.",
         help="serve the exported model with TF Serving and wait until it serves (or render a KServe "
              "InferenceService)", cli="lifecycle"),
)
# The one-line help of a first command word that several steps share (`vpipe train tf|mpi`).
GROUPS: dict[str, str] = {
    "render": "print the Volcano Job YAML for a training job",
    "train": "submit a training job and wait for it to finish",
}
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
