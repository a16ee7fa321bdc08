"""A step's output parameters, declared on its result type (`OUTPUTS: ClassVar[tuple[Output,
...]]`). Neutral, so a result type that lives below the step layer (transfer/result.py's
SyncResult) declares its outputs where it is defined; steps/registry.py reads them."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

__all__ = ["WHOLE", "Output", "output_type"]

# The output that carries the whole result (its to_dict()), rather than one field.
WHOLE = "<whole result>"


@dataclass(frozen=True)
class Output:
    """One output parameter of a step (a KFP component output; Argo writes one file per
    scalar result field anyway). Declared on the result type, in the order the component
    returns them: `OUTPUTS: ClassVar[tuple[Output, ...]]`."""

    name: str
    help: str
    field: str | None = None  # the result field it reads (default: `name`); WHOLE: to_dict()
    missing: Any = None  # what stands for None: a pipeline output has no "no value"
    drop: tuple[str, ...] = ()  # WHOLE: keys left out (a dry run's per-file plan can be huge)

    @property
    def source(self) -> str:
        return self.field or self.name

    def value(self, result: Any) -> Any:
        """This output's value in `result` (a step result)."""
        if self.source == WHOLE:
            data = result.to_dict()
            for key in self.drop:
                data.pop(key, None)
            return data
        value = getattr(result, self.source)
        if value is None:
            return self.missing
        return float(value) if output_type(type(result), self) is float else value


def output_type(result_type: type, out: Output) -> type:
    """The Python type of an output: dict for the whole result, else the field's hint
    without None (`float | None` -> float)."""
    if out.source == WHOLE:
        return dict
    hints = typing.get_type_hints(result_type)
    if out.source in hints:
        hint = hints[out.source]
    else:  # a property (RunReport.job_phase): its return type
        hint = typing.get_type_hints(getattr(result_type, out.source).fget)["return"]
    arms = [arm for arm in typing.get_args(hint) if arm is not type(None)] or [hint]
    return typing.cast(type, arms[0])
