"""The KFP components: one lightweight Python component per step, built from the source text
generate.py writes from the step's signature. Every component runs in the runtime image (the
package, pinned to its version) and installs nothing at start."""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

from kfp import dsl
from kfp.dsl.python_component import PythonComponent

from volcano_pipelines.kfp.generate import component_source
from volcano_pipelines.kfp.runtime import step_function
from volcano_pipelines.kfp.specs import COMPONENTS, RUNTIME_IMAGE, ComponentSource

__all__ = ["ALL", "build", "build_all", "define", "source_of", *COMPONENTS]

# What the module KFP writes into the pod starts with (kfp.dsl.component_factory): the
# generated annotations (Output[Metrics], NamedTuple(...), Optional[...]) rely on these names.
_EXECUTOR_HEADER = "from kfp.dsl import *\nfrom typing import *\n"


def source_of(spec: ComponentSource, step: Callable[..., Any] | None = None) -> str:
    return component_source(spec, step or step_function(spec.step))


def define(spec: ComponentSource, step: Callable[..., Any] | None = None) -> Any:
    """Define the generated function (for `step`, by default the one the spec names). KFP
    reads a lightweight component's source with inspect.getsource, which finds code that has
    no file through the line cache: register the text there under a name no file can have."""
    source = source_of(spec, step)
    filename = f"<volcano_pipelines.kfp component {spec.function}>"
    # mtime None: linecache.checkcache leaves the entry alone (there is no file to compare).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(_EXECUTOR_HEADER, namespace)  # noqa: S102 - our own constant text
    # dont_inherit: this module's `from __future__ import annotations` would turn the annotations
    # KFP reads into strings.
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # noqa: S102 - generated from our signatures
    return namespace[spec.function]


def build(spec: ComponentSource, step: Callable[..., Any] | None = None, base_image: str = RUNTIME_IMAGE) -> PythonComponent:
    # install_kfp_package=False: the runtime image has kfp; a pod must not pip-install at start.
    return dsl.component(define(spec, step), base_image=base_image, install_kfp_package=False)


def build_all(base_image: str = RUNTIME_IMAGE) -> dict[str, PythonComponent]:
    """Every component, running in `base_image` (`vpipe compile --runtime-image`: the runtime
    image under another registry's name)."""
    if base_image == RUNTIME_IMAGE and "ALL" in globals():
        return ALL
    return {name: build(spec, base_image=base_image) for name, spec in COMPONENTS.items()}


# One component per KFP step of the registry (steps/registry.py), each also a module attribute:
# `from volcano_pipelines.kfp.components import train_tf`.
ALL: dict[str, PythonComponent] = build_all()


def __getattr__(name: str) -> PythonComponent:
    try:
        return ALL[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
