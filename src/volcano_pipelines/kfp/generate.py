"""The source text of each KFP component function, generated from the step's one signature
(interface/params.py). KFP lightweight components ship their function's *source* to the pod and
read their inputs from its annotations, so the function must spell out every parameter with a
KFP type and a literal default: writing them by hand would be a second copy of every step
signature. Pure: text in, text out; nothing here imports kfp."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from volcano_pipelines.interface.params import Param, choices, container, optional, params, scalar_type, strip_none

if TYPE_CHECKING:  # the specs read every step's result type: a component pod loads only its own step
    from volcano_pipelines.kfp.specs import ComponentSource

__all__ = ["ARTIFACTS", "KFP_HELP", "UnsupportedParameter", "component_source", "kfp_default", "kfp_type"]

# Every step component writes these two output artifacts (KFP artifact types).
ARTIFACTS: tuple[tuple[str, str, str], ...] = (
    ("metrics", "Metrics", "numbers of this step (shown in the run's metrics view)"),
    ("summary", "Markdown", "what happened, as a table (shown in the run's visualizations)"),
)


# Where an optional parameter means more in a KFP component than the step's own help says
# (kfp/runtime.py fills an empty run_id in).
KFP_HELP = {
    "run_id": "run identity, a label on what the step creates: a retried step with the same id attaches to it "
              "instead of creating anew (empty: the KFP run id, read from the step pod's pipeline/runid label)",
}


# Every step acts outside KFP (stages data, runs or ends jobs, applies objects), and KFP caches
# a task by default: a cached sync stages no new data. A component cannot turn caching off (it
# is the task's and the run's setting), so its description says so where a user reads it.
CACHING_NOTE = ("In a pipeline of your own, turn KFP's caching off for this task (task.set_caching_options(False)): "
                "a cached task is not run again, and its effect outside KFP does not happen.")


class UnsupportedParameter(TypeError):
    """A step parameter whose type has no KFP equivalent: the generator refuses it rather
    than leave an argument out of the component silently."""


def kfp_type(hint: Any) -> tuple[str, bool]:
    """A step parameter's type hint (Mapping[str, int] | None) -> (KFP-compatible Python type
    text, may be None). KFP parameters are str, int, float, bool, list and dict; a Literal is
    its values' type."""
    kind = container(hint)
    if kind is None:
        bare = strip_none(hint)
        kind = scalar_type(bare).__name__
        if bare not in (str, int, float, bool) and choices(bare) is None:
            raise UnsupportedParameter(f"no KFP parameter type for {hint!r}")
    return kind, optional(hint)


def kfp_default(value: Any, base: str) -> Any:
    """A step default as a KFP default: tuples are lists (KFP defaults are JSON), an int
    default of a float parameter is a float."""
    if isinstance(value, tuple):
        return [kfp_default(item, "") for item in value]
    if base == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _docstring_text(text: str) -> str:
    # Help text goes into a triple-quoted docstring of generated code.
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _annotation(param: Param) -> str:
    base, may_be_none = kfp_type(param.hint)
    return f"Optional[{base}]" if may_be_none or (not param.required and param.default is None) else base


def component_source(spec: ComponentSource, step: Callable[..., Any]) -> str:
    """The component function's source: typed inputs (required ones first, then the output
    artifacts, then those with defaults), a docstring KFP turns into input descriptions, and
    a body that hands everything to volcano_pipelines.kfp.runtime."""
    step_params = [p for p in params(step) if p.name not in spec.skip]
    artifacts = (*ARTIFACTS, *spec.artifacts)
    reserved = {name for name, _, _ in artifacts} | {name for name, _, _ in spec.extra_inputs}
    clash = sorted(reserved & {p.name for p in step_params})
    if clash:
        raise UnsupportedParameter(f"step parameter {clash[0]!r} clashes with a component input of the same name")
    required = [p for p in step_params if p.required]
    optional = [p for p in step_params if not p.required]
    lines = [f"def {spec.function}("]
    for p in required:
        lines.append(f"    {p.name}: {_annotation(p)},")
    for name, annotation, _ in spec.extra_inputs:
        lines.append(f"    {name}: {annotation},")
    for name, kind, _ in artifacts:
        lines.append(f"    {name}: Output[{kind}],")
    for p in optional:
        base, _ = kfp_type(p.hint)
        lines.append(f"    {p.name}: {_annotation(p)} = {kfp_default(p.default, base)!r},")
    fields = ", ".join(f"({name!r}, {kind})" for name, kind, _ in spec.outputs)
    # KFP reads a NamedTuple's fields as the outputs and refuses one with none: a step whose
    # result marks no output parameter returns nothing to KFP.
    lines.append(f") -> NamedTuple('Outputs', [{fields}]):" if spec.outputs else ") -> None:")
    lines.append(f'    """{_docstring_text(spec.summary)}')
    lines.append("")
    if spec.step != "finish_run":  # the exit handler only reports and cleans up after its own run
        lines.append(f"    {_docstring_text(CACHING_NOTE)}")
        lines.append("")
    lines.append("    Args:")
    documented: Sequence[tuple[str, str]] = [
        *((p.name, p.help) for p in required),
        *((name, text) for name, _, text in spec.extra_inputs),
        *((name, text) for name, _, text in artifacts),
        *((p.name, KFP_HELP.get(p.name, p.help)) for p in optional),
    ]
    for name, text in documented:
        lines.append(f"        {name}: {_docstring_text(text) or name.replace('_', ' ')}")
    if spec.outputs:
        lines.append("")
        lines.append("    Returns:")
        for name, _, text in spec.outputs:
            lines.append(f"        {name}: {_docstring_text(text)}")
    lines.append('    """')
    lines.append("    from volcano_pipelines.kfp.runtime import run_step")
    lines.append("")
    lines.append(f"    {'return ' if spec.outputs else ''}run_step({spec.step!r}, {{")
    for name, _, _ in spec.extra_inputs:
        lines.append(f"        {name!r}: {name},")
    for p in step_params:
        lines.append(f"        {p.name!r}: {p.name},")
    lines.append(f"    }}, {', '.join(f'{name}={name}' for name, _, _ in artifacts)})")
    return "\n".join(lines) + "\n"
