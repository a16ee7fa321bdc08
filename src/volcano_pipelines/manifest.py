"""Kubernetes objects as YAML text people can read (scripts as literal blocks)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

__all__ = ["to_yaml"]


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: dict[str, Any] | Iterable[dict[str, Any]]) -> str:
    docs = [objects] if isinstance(objects, dict) else list(objects)
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120)
