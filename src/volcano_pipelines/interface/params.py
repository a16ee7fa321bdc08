"""A step's parameters, read from its one signature (names, defaults, and types through
typing.get_type_hints) and its one docstring (the help of each argument), so that the CLI's
--help, a KFP component's inputs and an Argo template's parameters are all derived from the
same place and cannot drift. Choices are Literal types; per-task settings are mappings keyed
by task name."""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import operator
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

from volcano_pipelines.declaration import Doc, arg
from volcano_pipelines.errors import InputError

__all__ = ["NOT_FRONT_END", "Doc", "Param", "arg", "bind", "check_types", "choices", "container", "declare", "declared",
           "describe", "extend_signature", "gather", "group_fields", "grouped", "is_group", "item_hint", "optional", "params",
           "scalar_type", "strip_none"]

F = TypeVar("F", bound=Callable[..., Any])
G = TypeVar("G")
# Python-only arguments: objects, not values a pipeline can pass.
NOT_FRONT_END = frozenset({"progress"})


@dataclass(frozen=True)
class Param:
    name: str
    hint: Any  # the resolved type hint, e.g. Mapping[str, str] | None
    default: Any
    required: bool
    help: str


# --- reading a type hint ---------------------------------------------------------------------

def _union_arms(hint: Any) -> tuple[Any, ...]:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)


def optional(hint: Any) -> bool:
    """`X | None`."""
    return type(None) in _union_arms(hint)


def strip_none(hint: Any) -> Any:
    """`X | None` -> X."""
    arms = [arm for arm in _union_arms(hint) if arm is not type(None)]
    return functools.reduce(operator.or_, arms) if arms else hint


def choices(hint: Any) -> tuple[Any, ...] | None:
    """The values a Literal hint allows (`Literal["delete", "abort"] | None` too); None for others."""
    bare = strip_none(hint)
    return typing.get_args(bare) if typing.get_origin(bare) is typing.Literal else None


def container(hint: Any) -> str | None:
    """'list' for sequences, 'dict' for mappings, None for a scalar."""
    origin = typing.get_origin(strip_none(hint))
    if origin in _SEQUENCES:
        return "list"
    if origin in _MAPPINGS:
        return "dict"
    return None


def item_hint(hint: Any) -> Any:
    """The items of a sequence, the values of a mapping: Mapping[str, int] -> int."""
    args = [a for a in typing.get_args(strip_none(hint)) if a is not Ellipsis]
    return args[-1] if args else Any


def scalar_type(hint: Any) -> type:
    """The Python type of a scalar hint: int for `int | None`, str for a Literal of strings."""
    bare = strip_none(hint)
    values = choices(bare)
    if values:
        return type(values[0])
    return bare if bare in (str, int, float, bool) else str


# --- the Args: section of a docstring -----------------------------------------------------------

def _arg_docs(fn: Callable[..., Any]) -> dict[str, str]:
    """`name: text` entries of the docstring's `Args:` section; a deeper-indented line
    continues the entry above it. Any indentation: entries are the lines indented like the
    first one."""
    docs: dict[str, str] = {}
    lines = inspect.cleandoc(fn.__doc__ or "").splitlines()
    if "Args:" not in (line.strip() for line in lines):
        return docs
    start = next(i for i, line in enumerate(lines) if line.strip() == "Args:") + 1
    indent: int | None = None
    current: str | None = None
    for line in lines[start:]:
        if not line.strip():
            break
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth == indent:
            name, sep, text = line.strip().partition(":")
            if not sep or not name.isidentifier():
                break
            current = name
            docs[name] = text.strip()
        elif depth > indent and current is not None:
            docs[current] += " " + line.strip()
        else:
            break
    return docs


@functools.cache
def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    return typing.get_type_hints(fn)


@functools.cache
def _annotated_docs(fn: Callable[..., Any]) -> dict[str, Doc]:
    """The Doc a parameter's hint carries (`namespace: Namespace`, an `Annotated[..., Doc]` several
    steps share): its help is written there, not in each docstring."""
    raw = typing.get_type_hints(fn, include_extras=True)
    return {name: doc for name, hint in raw.items() if typing.get_origin(hint) is typing.Annotated
            for doc in hint.__metadata__ if isinstance(doc, Doc)}


def params(fn: Callable[..., Any]) -> list[Param]:
    """The front-end parameters of a step, in signature order, each with its type and help; a
    parameter group (`connection: Connection`) is spread into its fields where it stands, each
    with the help its Doc gives for this step (Doc.help_for the step's name), as is a parameter
    whose hint carries a Doc (`namespace: Namespace`)."""
    docs = _arg_docs(fn)
    docs.update({name: doc.help_for(fn.__name__) for name, doc in _annotated_docs(fn).items() if name not in docs})
    hints = _hints(fn)
    out: list[Param] = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in NOT_FRONT_END or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        hint = hints.get(p.name, Any)
        if is_group(hint):
            out.extend(Param(name, field_hint, default, False, doc.help_for(fn.__name__))
                       for name, field_hint, default, doc in group_fields(hint))
            continue
        required = p.default is p.empty
        out.append(Param(p.name, hint, None if required else p.default, required, docs.get(p.name, "")))
    return out


# --- a parameter group passed whole ----------------------------------------------------------
# A step takes a group every step shares (the cluster connection) as one parameter of the
# group's type; the front ends show its fields as flat inputs (`params`), and `grouped` turns
# the flat values they collect back into the step's arguments.

def is_group(hint: Any) -> TypeGuard[type]:
    """A parameter group: a dataclass whose every field is declared (`arg`)."""
    return (isinstance(hint, type) and dataclasses.is_dataclass(hint)
            and all("vpipe" in item.metadata for item in dataclasses.fields(hint)))


@functools.cache
def group_fields(group: Any) -> tuple[tuple[str, Any, Any, Doc], ...]:
    """(name, type hint, default, Doc) of each field of a group."""
    hints = typing.get_type_hints(group)
    return tuple((item.name, hints[item.name], item.default, item.metadata["vpipe"]) for item in dataclasses.fields(group))


def gather(group: type[G], values: Mapping[str, Any]) -> G:
    """The group of the fields `values` holds (a front end's flat values; None: the default)."""
    names = [item.name for item in dataclasses.fields(typing.cast(Any, group))]
    given = {name: values[name] for name in names if values.get(name) is not None}
    return group(**given)


def grouped(fn: Callable[..., Any], flat: Mapping[str, Any]) -> dict[str, Any]:
    """Flat front-end values (a group's fields among the others) as the arguments of `fn`: the fields
    of each group parameter gathered into the group (the others as they are)."""
    out = dict(flat)
    hints = _hints(fn)
    for name in inspect.signature(fn).parameters:
        group = hints.get(name)
        if is_group(group):
            fields = {field: out.pop(field) for field, _, _, _ in group_fields(group) if field in out}
            if fields and name not in out:
                out[name] = group(**fields)
    return out


def extend_signature(*sources: Callable[..., Any]) -> Callable[[F], F]:
    """`fn(name, *, run arguments..., **job)` takes the job arguments of `sources` (e.g.
    render_tf): give it one signature, one set of type hints and one docstring holding both,
    so callers and front ends see every argument it accepts."""

    def decorate(fn: F) -> F:
        own = inspect.signature(fn)
        kept = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
        names = {p.name for p in kept}
        extra_docs: list[str] = []
        hints = _hints_but_kwargs(fn)
        indent = _entry_indent(fn.__doc__ or "")
        for source in sources:
            source_docs = _arg_docs(source)
            source_hints = typing.get_type_hints(source)
            for p in inspect.signature(source).parameters.values():
                if p.name not in names:
                    kept.append(p.replace(kind=p.KEYWORD_ONLY))
                    names.add(p.name)
                    hints[p.name] = source_hints[p.name]
                    if p.name in source_docs:
                        extra_docs.append(f"{indent}{p.name}: {source_docs[p.name]}")
        # `progress` (a Python object) goes last, after every value a pipeline can pass.
        kept.sort(key=lambda p: (p.kind is p.POSITIONAL_OR_KEYWORD and 0) or (2 if p.name in NOT_FRONT_END else 1))
        setattr(fn, "__signature__", own.replace(parameters=kept))
        fn.__annotations__ = hints
        if extra_docs:
            fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n" + "\n".join(extra_docs) + "\n"
        return fn

    return decorate


def _hints_but_kwargs(fn: Callable[..., Any]) -> dict[str, Any]:
    """The type hints of `fn` but its **kwargs', dropped unread: that `Unpack[...]` (steps/_job_params.py)
    is for a reader, an editor and mypy; Python 3.10 has no Unpack to evaluate it with."""
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            fn.__annotations__.pop(p.name, None)
    return typing.get_type_hints(fn)


def _entry_indent(doc: str) -> str:
    """The indentation of the Args: entries as written in `doc` (raw, not cleaned)."""
    lines = doc.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Args:" and i + 1 < len(lines):
            following = lines[i + 1]
            return following[: len(following) - len(following.lstrip())]
    return " " * 8


# --- parameter groups declared once -----------------------------------------------------------
# A group of parameters (the job's policy, where its code comes from, its storage, per-task
# settings, how a run waits) is a frozen dataclass whose fields carry type, default and help
# together; `declare` turns groups into the flat keyword arguments of a step function: its
# signature, type hints and docstring, from which every front end is derived in turn.

@functools.cache
def declared(*groups: type) -> tuple[tuple[str, Any, Any, Doc], ...]:
    """(name, type hint, default, Doc) of every field of `groups`, in order (read once)."""
    return tuple(item for group in groups for item in group_fields(group))


def declare(*groups: type, kind: str = "") -> Callable[[F], F]:
    """Give `fn(name, ..., **job)` the flat keyword parameters of `groups`: one signature, one
    set of type hints and one docstring (its own Args: entries, then one per declared
    parameter, with the help for `kind`). `fn` receives them in **job; `bind` checks them."""

    def decorate(fn: F) -> F:
        own = inspect.signature(fn)
        kept = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
        hints = _hints_but_kwargs(fn)
        indent = _entry_indent(fn.__doc__ or "")
        lines: list[str] = []
        for name, hint, default, doc in declared(*groups):
            kept.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
            hints[name] = hint
            lines.append(f"{indent}{name}: {doc.help_for(kind)}")
        kept.sort(key=lambda p: (p.kind is p.POSITIONAL_OR_KEYWORD and 0) or (2 if p.name in NOT_FRONT_END else 1))
        setattr(fn, "__signature__", own.replace(parameters=kept))
        fn.__annotations__ = hints
        fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n" + "\n".join(lines) + "\n"
        return fn

    return decorate


@functools.cache
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(fn)


def bind(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments of a call to `fn` (a declared signature) by name, defaults filled in; an
    argument `fn` does not take is an InputError naming it."""
    signature = _signature(fn)
    unknown = sorted(set(kwargs) - set(signature.parameters))
    if unknown:
        raise InputError(unknown[0], kwargs[unknown[0]], f"an argument of {fn.__name__}")
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


# --- argument types ------------------------------------------------------------------------
# Python callers pass values the front ends never would: a string where a list is meant
# (iterated, it would become one argument per character), "4" where a number is meant.
# Every step checks its arguments against its own type hints first, so such a value is an
# InputError naming the argument, not a TypeError deep inside or a wrong job.

_SEQUENCES = (collections.abc.Sequence, list, tuple)
_MAPPINGS = (collections.abc.Mapping, dict)


def _accepts(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(value, arm) for arm in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # an int is a float to Python callers, KFP and JSON alike
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in _SEQUENCES:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            return False
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return not args or all(_accepts(item, args[0]) for item in value)
    if origin in _MAPPINGS:
        if not isinstance(value, Mapping):
            return False
        pair = typing.get_args(hint)
        return not pair or all(_accepts(k, pair[0]) and _accepts(v, pair[1]) for k, v in value.items())
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # a hint this check does not model: the step's own checks decide


def describe(hint: Any) -> str:
    """What a type hint allows, in words: 'a list of strings', 'a mapping of strings to
    integers', 'an integer or None'."""
    origin = typing.get_origin(hint)
    if hint is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(hint)
        words = [describe(arm) for arm in arms if arm is not type(None)]
        return " or ".join(words) + (" or None" if type(None) in arms else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(hint))
    simple = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in simple:
        return simple[hint]
    if origin in _SEQUENCES:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        inner = _plural(args[0]) if args else "values"
        return f"a list of {inner} (a string is not taken as a list of its characters)"
    if origin in _MAPPINGS:
        key, value = typing.get_args(hint) or (Any, Any)
        return f"a mapping of {_plural(key)} to {_plural(value)}"
    return getattr(hint, "__name__", str(hint))


def _plural(hint: Any) -> str:
    origin = typing.get_origin(hint)
    simple = {bool: "booleans", int: "integers", float: "numbers", str: "strings", Any: "values"}
    if hint in simple:
        return simple[hint]
    if origin in _SEQUENCES:
        args = typing.get_args(hint)
        return f"lists of {_plural(args[0]) if args else 'values'}"
    if origin in _MAPPINGS:
        key, value = typing.get_args(hint) or (Any, Any)
        return f"mappings of {_plural(key)} to {_plural(value)}"
    return describe(hint)


def check_types(fn: Callable[..., Any], arguments: Mapping[str, Any]) -> None:
    """Raise InputError for the first argument of `fn` (given as `arguments`, e.g. its
    locals()) whose value its type hint does not allow."""
    hints = _hints(fn)
    declared_params = _signature(fn).parameters
    for name, value in arguments.items():
        if name in NOT_FRONT_END or name not in hints or name == "return":
            continue
        if name in declared_params and value is declared_params[name].default:
            continue  # the declared default (the common case): nothing to check
        if is_group(hints[name]) and isinstance(value, hints[name]):
            for field, field_hint, default, _ in group_fields(hints[name]):
                item = getattr(value, field)
                if item is not default and not _accepts(item, field_hint):
                    raise InputError(field, item, describe(field_hint))
        elif not _accepts(value, hints[name]):
            raise InputError(name, value, describe(hints[name]))
