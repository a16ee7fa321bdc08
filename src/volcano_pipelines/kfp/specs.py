"""What each KFP component is, read from the step registry (steps/registry.py): the step it
calls, its summary and the output parameters its result type marks. Only what is KFP's own
is written here: the exit handler's extra input. Shared by the generator (compile time) and
the runtime (inside the step pod); imports no kfp."""

from __future__ import annotations

from dataclasses import dataclass, fields

from volcano_pipelines.images import RUNTIME_IMAGE  # the image every component runs in
from volcano_pipelines.steps.registry import KFP, Output, output_type, steps_for
from volcano_pipelines.interface.spelling import LOCAL_BACKEND_PARAMS

__all__ = ["COMPONENTS", "POST_MORTEM_ARTIFACT", "RUNTIME_IMAGE", "ComponentSource"]


@dataclass(frozen=True)
class ComponentSource:
    """One component: its function name, the step it calls (a registry name), a one-line
    summary, the output parameters it returns (name, KFP type, help) and any extra inputs that
    stand for step parameters (`skip`)."""

    function: str
    step: str
    summary: str
    outputs: tuple[tuple[str, str, str], ...]
    extra_inputs: tuple[tuple[str, str, str], ...] = ()  # (name, annotation, help)
    skip: frozenset[str] = frozenset()
    # Output artifacts beyond every component's metrics and summary (name, KFP type, help).
    artifacts: tuple[tuple[str, str, str], ...] = ()


# The exit handler gets KFP's PipelineTaskFinalStatus, which stands for two step parameters.
_EXTRA: dict[str, tuple[tuple[tuple[str, str, str], ...], frozenset[str]]] = {
    "finish_run": ((("status", "PipelineTaskFinalStatus", "the final status of the pipeline's tasks (set by KFP)"),),
                   frozenset({"pipeline_state", "error_message"})),
}


def _outputs(result_type: type, outputs: tuple[Output, ...]) -> tuple[tuple[str, str, str], ...]:
    return tuple((out.name, output_type(result_type, out).__name__, out.help) for out in outputs)


# A step whose result can carry a post-mortem record (the train steps, the exit handler) saves
# the record's files into this artifact (kfp/runtime.py points the record's directory at it).
POST_MORTEM_ARTIFACT = ("post_mortem", "Artifact",
                        "the post-mortem record of the training job's pods, when one was written: "
                        "<namespace>/<job>.json and a Markdown summary <namespace>/<job>.md")


def _artifacts(result_type: type) -> tuple[tuple[str, str, str], ...]:
    return (POST_MORTEM_ARTIFACT,) if "post_mortem" in {f.name for f in fields(result_type)} else ()


COMPONENTS: dict[str, ComponentSource] = {
    item.name: ComponentSource(item.name, item.name, item.summary, _outputs(item.result_type(), item.outputs()),
                               _EXTRA.get(item.name, ((), frozenset()))[0],
                               # A component runs in a cluster: the local backend's parameters are left out.
                               _EXTRA.get(item.name, ((), frozenset()))[1] | LOCAL_BACKEND_PARAMS,
                               _artifacts(item.result_type()))
    for item in steps_for(KFP)
}
