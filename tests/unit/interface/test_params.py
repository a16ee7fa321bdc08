"""interface/params.py: parameters read from a step's signature, type hints and docstring."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from volcano_pipelines.steps import train_tf
from volcano_pipelines.interface.params import choices, container, extend_signature, item_hint, params, scalar_type


def _two_spaces(name: str, *, cpu: Mapping[str, str] | None = None, mode: Literal["a", "b"] = "a") -> None:
    """Indented by two spaces, not eight.

    Args:
      name: the name
      cpu: CPU per task,
        continued on a deeper line
      mode: a or b

    Returns nothing.
    """


def test_help_is_read_whatever_the_docstring_indentation() -> None:
    found = {p.name: p for p in params(_two_spaces)}
    assert found["name"].help == "the name"
    assert found["cpu"].help == "CPU per task, continued on a deeper line"
    assert found["mode"].help == "a or b"


def test_types_come_from_the_type_hints_not_their_text() -> None:
    found = {p.name: p for p in params(_two_spaces)}
    assert found["name"].hint is str
    assert container(found["cpu"].hint) == "dict" and item_hint(found["cpu"].hint) is str
    assert choices(found["mode"].hint) == ("a", "b") and scalar_type(found["mode"].hint) is str
    assert container(Sequence[int] | None) == "list" and item_hint(Sequence[int] | None) is int


def test_an_extended_signature_carries_the_sources_hints_and_help() -> None:
    found = {p.name: p for p in params(train_tf)}
    assert found["workers"].hint is int and found["workers"].help == "workers"
    assert choices(found["on_cancel"].hint) == ("delete", "abort", "keep")
    assert list(found)[0] == "name" and "progress" not in found

    def render(name: str, *, extra: int = 1) -> None:
        """Render.

        Args:
            name: the name
            extra: an extra
        """

    @extend_signature(render)
    def run(name: str, *, wait: bool = True, **job: object) -> None:
        """Run.

        Args:
            name: the name
            wait: wait
        """

    extended = {p.name: p for p in params(run)}
    assert extended["extra"].hint is int and extended["extra"].help == "an extra"


def test_a_namespace_is_explained_once_and_each_step_shows_its_own_wording() -> None:
    """`namespace: Namespace` carries its help (k8s/connection.py NAMESPACE): each step that takes
    one reads its own wording there, none writes a docstring line for it, and the front ends
    see a plain `str | None` (the Annotated wrapper is the help's, not a type of its own)."""
    from volcano_pipelines.steps import finish_run, reap, serve, status, tensorboard

    rule = "(default: the context's namespace, else default)"
    wording = {serve: "namespace", tensorboard: "namespace", reap: "namespace to look in",
               status: "namespace of the job", train_tf: "namespace of the job",
               finish_run: "namespace of the run's training job"}
    for step, what in wording.items():
        found = {p.name: p for p in params(step)}["namespace"]
        assert found.help == f"{what} {rule}", step.__name__
        assert found.hint == str | None and found.default is None, step.__name__
        # train_tf's docstring is built by `declare`, from its Run group's field, which takes the same Doc.
        written = [line for line in (step.__doc__ or "").splitlines() if line.strip().startswith("namespace:")]
        assert written == [] or step is train_tf, step.__name__
