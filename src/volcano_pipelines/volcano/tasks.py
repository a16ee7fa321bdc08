"""The tasks (Volcano task names) of each kind of job. A module of its own: the step registry,
which every `vpipe` command reads, names them without building the job specs' dataclasses
(volcano/spec.py, about 8 ms of a no-op `vpipe sync`'s 0.2 s)."""

from __future__ import annotations

__all__ = ["MPI_TASKS", "TF_TASKS"]

TF_TASKS = ("ps", "worker", "chief", "evaluator")
MPI_TASKS = ("mpimaster", "mpiworker")
