"""A declared parameter: a dataclass field that carries its default together with what it
says about itself (help, the spec path an error names it by, whether a pipeline run takes it
as it is). Neutral so that the pure job specs (volcano/spec.py) and the steps' parameter
groups (steps/_job_params.py) declare their fields the same way, once: the job's options are
declared where the builders read them, and the steps take them from there (interface/params.py
`declare`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["Doc", "arg"]


@dataclass(frozen=True)
class Doc:
    """What a declared parameter says about itself: its help (per kind of job where it
    differs, e.g. {"mpi": ...}; for a group a step takes whole, per step, e.g. {"serve": ...}),
    the spec path validation names it by (job.max_retry,
    *.resources.cpu for a per-task setting of every task), so an error names the argument,
    and whether the train-and-serve pipelines take it as a run parameter under its own name,
    type, default and help (kfp/pipelines.py)."""

    help: str
    spec: str | None = None
    by_kind: tuple[tuple[str, str], ...] = ()
    pipeline: bool = False

    def help_for(self, kind: str) -> str:
        return dict(self.by_kind).get(kind, self.help)


def arg(default: Any, help: str, *, spec: str | None = None, pipeline: bool = False, **by_kind: str) -> Any:
    """A declared parameter: a dataclass field with its default and its Doc."""
    return dataclasses.field(default=default, metadata={"vpipe": Doc(help, spec, tuple(by_kind.items()), pipeline)})
