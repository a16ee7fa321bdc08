"""A step's parameters, read from its one signature and one docstring, so that the CLI's
--help, a KFP component's inputs and an Argo template's parameters are all derived from the
same place and cannot drift."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["NOT_FRONT_END", "Param", "extend_signature", "params"]

F = TypeVar("F", bound=Callable[..., Any])
# Python-only arguments: objects, not values a pipeline can pass.
NOT_FRONT_END = frozenset({"progress"})
_ARG_LINE = re.compile(r"^\s{8}(\w+): (.*)$")


@dataclass(frozen=True)
class Param:
    name: str
    annotation: str  # as written in the signature, e.g. "int", "Mapping[str, str] | None"
    default: Any
    required: bool
    help: str


def _arg_docs(fn: Callable[..., Any]) -> dict[str, str]:
    """The `Args:` section of a docstring: `name: text`, one line each (continuations appended)."""
    docs: dict[str, str] = {}
    lines = (fn.__doc__ or "").splitlines()
    current: str | None = None
    inside = False
    for line in lines:
        if line.strip() == "Args:":
            inside = True
            continue
        if not inside:
            continue
        match = _ARG_LINE.match(line)
        if match:
            current = match.group(1)
            docs[current] = match.group(2).strip()
        elif current and line.startswith(" " * 12) and line.strip():
            docs[current] += " " + line.strip()
        elif line.strip():
            break
    return docs


def params(fn: Callable[..., Any]) -> list[Param]:
    """The front-end parameters of a step, in signature order, each with its help text."""
    docs = _arg_docs(fn)
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in NOT_FRONT_END or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        annotation = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
        required = p.default is p.empty
        out.append(Param(p.name, annotation, None if required else p.default, required, docs.get(p.name, "")))
    return out


def extend_signature(*sources: Callable[..., Any]) -> Callable[[F], F]:
    """`fn(name, *, run arguments..., **job)` takes the job arguments of `sources` (e.g.
    render_tf): give it one signature and one docstring holding both, so callers and front
    ends see every argument it accepts."""

    def decorate(fn: F) -> F:
        own = inspect.signature(fn)
        kept = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
        names = {p.name for p in kept}
        extra_docs: list[str] = []
        for source in sources:
            source_docs = _arg_docs(source)
            for p in inspect.signature(source).parameters.values():
                if p.name not in names:
                    kept.append(p.replace(kind=p.KEYWORD_ONLY))
                    names.add(p.name)
                    if p.name in source_docs:
                        extra_docs.append(f"        {p.name}: {source_docs[p.name]}")
        # `progress` (a Python object) goes last, after every value a pipeline can pass.
        kept.sort(key=lambda p: (p.kind is p.POSITIONAL_OR_KEYWORD and 0) or (2 if p.name in NOT_FRONT_END else 1))
        fn.__signature__ = own.replace(parameters=kept)  # type: ignore[attr-defined]
        if extra_docs:
            fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n" + "\n".join(extra_docs) + "\n"
        return fn

    return decorate
