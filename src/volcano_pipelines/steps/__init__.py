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
_HOMES = registry.exports()
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
