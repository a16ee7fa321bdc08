"""The package's source files parsed once per test session: several structural tests (the
import layers, private step modules, hand-kept step lists) read every module's syntax tree,
and parsing all of src/ costs about a second each time. The trees are only read (ast.walk),
never changed, so one parse per file serves them all."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

__all__ = ["parsed"]


@functools.cache
def parsed(path: Path) -> ast.Module:
    """`ast.parse(path.read_text())`, once per path. Do not modify the tree."""
    return ast.parse(path.read_text())
