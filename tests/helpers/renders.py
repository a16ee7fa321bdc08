"""The generated artifacts (`vpipe compile`'s front ends), rendered once per runtime image for
the whole test session. Rendering is the expensive part of `vpipe compile` (about a second per
front end: KFP's compiler and Hera dump every file with PyYAML's pure-Python emitter), and
several tests read the same text: the freshness tests, the Argo behaviour tests, and the tests
of what `vpipe compile` does with the files (write, check, stage, refuse).

- `rendered(module)`: a front end's `artifacts()` as rendered (the first time: for real) in
  this session, a fresh dict each call.
- `kfp_pipeline(kind)`: `compile_text(train_and_serve(kind))`, the KFP pipeline with every
  default, compiled once per session (the pipeline tests read its IR; one with other options
  is compiled by the test that asks for them).
- `share_renders(monkeypatch)`: for one test, each installed front end's `artifacts()` hands
  out that text too, so `vpipe compile` in the test renders nothing twice; everything around
  it (image check, all_artifacts' merge, stale(), write_all) runs as it does for a user.

That the rendered text is right and reproducible is what the freshness tests check (a render
of this session equals the committed file: tests/unit/kfp/test_compile.py and tests/unit/argo
test_committed_*_is_fresh); the tests that take a front end away (no kfp, no hera) render for
real and use neither."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import pytest

from volcano_pipelines.images import RUNTIME_IMAGE

__all__ = ["kfp_pipeline", "rendered", "share_renders"]

_RENDERED: dict[tuple[str, str], dict[str, str]] = {}


def _once(module: str, runtime_image: str, render: Callable[..., dict[str, str]]) -> dict[str, str]:
    key = (module, runtime_image)
    if key not in _RENDERED:
        _RENDERED[key] = render(runtime_image=runtime_image)
    return dict(_RENDERED[key])  # a copy: a caller may change its dict, never the shared one


def rendered(module: str, runtime_image: str = RUNTIME_IMAGE) -> dict[str, str]:
    """`importlib.import_module(module).artifacts(runtime_image)`, rendered once per session."""
    return _once(module, runtime_image, importlib.import_module(module).artifacts)


@functools.cache
def kfp_pipeline(kind: str) -> str:
    """`compile_text(pipelines.train_and_serve(kind))`, compiled once per session (a str: nobody
    can change it; each caller parses its own objects from it)."""
    from volcano_pipelines.kfp import pipelines
    from volcano_pipelines.kfp.compile import compile_text

    return compile_text(pipelines.train_and_serve(kind))


def share_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """For this test: every installed front end's artifacts() rendered once per image per session."""
    from volcano_pipelines.cli import compile as compile_cli

    for name in compile_cli.FRONT_ENDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue  # not installed: all_artifacts() skips it (or notes it) as it would anyway
        real = module.artifacts

        def artifacts(runtime_image: str = RUNTIME_IMAGE, *, _name: str = name,
                      _real: Callable[..., dict[str, str]] = real) -> dict[str, str]:
            return _once(_name, runtime_image, _real)

        monkeypatch.setattr(module, "artifacts", artifacts)
