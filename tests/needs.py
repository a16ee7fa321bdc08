"""What a test does when the real system it needs (HDFS, GlusterFS, the control plane)
cannot be had on this machine: outside CI it skips with a one-line reason (a developer
without GlusterFS still runs everything else); in CI (`CI=true`, as `.ci/run` exports)
it fails, so a broken preparation step can never turn into a green run that tested
nothing."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Literal, NoReturn

import pytest

CI_ENV = "CI"


def skip_or_fail(env: Mapping[str, str] | None = None) -> Literal["skip", "fail"]:
    """"fail" when the environment says this is a CI run (CI=true, as CI services set it;
    also 1 / yes), else "skip"."""
    value = (os.environ if env is None else env).get(CI_ENV, "")
    return "fail" if value.strip().lower() in ("true", "1", "yes") else "skip"


def unavailable(reason: str, env: Mapping[str, str] | None = None) -> NoReturn:
    """Skip (outside CI) or fail (in CI) the current test, with `reason` as the one line."""
    if skip_or_fail(env) == "fail":
        pytest.fail(f"{reason} [{CI_ENV}=true: a test whose system cannot be had fails in CI]", pytrace=False)
    pytest.skip(reason)


def module(name: str, reason: str, env: Mapping[str, str] | None = None) -> ModuleType:
    """`pytest.importorskip` that obeys CI=true: the module, else (at collection, for the whole
    test module) a skip with `reason` outside CI and a failure in CI."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if skip_or_fail(env) == "fail":
            pytest.fail(f"{reason} [{CI_ENV}=true: a test whose system cannot be had fails in CI]", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
