"""The Python API checks argument types against the step's own type hints before anything
else: a string where a list is meant is refused (iterated, it would be split into one
argument per character), and a value of the wrong type is an InputError naming the argument,
not a bare TypeError / ValueError from deep inside. Counts Volcano stores as int32 are
bounded. (Issue 24, item 5.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from volcano_pipelines.cli import main
from volcano_pipelines.errors import EXIT_BAD_INPUT, InputError
from volcano_pipelines.steps import Placement, render_mpi, render_tf, serve, sync, tensorboard, train_tf

INT32_MAX = 2**31 - 1


def _refused(call: Any, argument: str) -> InputError:
    with pytest.raises(InputError) as caught:
        call()
    assert caught.value.field == argument, caught.value
    return caught.value


@pytest.mark.parametrize("argument, value", [
    ("args", "--steps=3"),
    ("image_pull_secrets", "sec"),
])
def test_a_string_for_a_list_is_refused_not_split_into_characters(argument: str, value: str) -> None:
    err = _refused(lambda: render_tf("x", **{argument: value}), argument)
    assert "not taken as a list of its characters" in err.allowed


def test_a_list_of_strings_is_taken_whole() -> None:
    job = render_tf("x", args=["--steps=3"], image_pull_secrets=["sec"])
    assert job["spec"]["tasks"][0]["template"]["spec"]["imagePullSecrets"] == [{"name": "sec"}]
    command = str(job["spec"]["tasks"][0]["template"]["spec"]["containers"][0])
    assert "--steps=3" in command


def test_sync_include_string_is_refused_before_anything_is_copied(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "a.csv").write_text("1")
    (src / "b.txt").write_text("2")
    _refused(lambda: sync(str(src), str(dst), include="*.csv"), "include")  # type: ignore[arg-type]
    assert not dst.exists()
    result = sync(str(src), str(dst), include=["*.csv"])
    assert result.copied == 1 and sorted(p.name for p in dst.iterdir() if not p.name.startswith(".")) == ["a.csv"]


@pytest.mark.parametrize("call, argument", [
    (lambda: render_tf("x", cpu="4"), "cpu"),
    (lambda: render_tf("x", tolerations="gpu=true:NoSchedule"), "tolerations"),
    (lambda: render_tf("x", labels=["a=b"]), "labels"),
    (lambda: render_tf("x", gpus={"worker": "1"}), "gpus"),
    (lambda: render_tf("x", workers="2"), "workers"),
    (lambda: render_tf("x", chief="yes"), "chief"),
    (lambda: render_mpi("x", command="python train.py"), "command"),
    (lambda: sync(123, 456), "src"),
    (lambda: sync("/nonexistent-src", "/tmp/dst", shards="4"), "shards"),
    (lambda: tensorboard("tb", log_pvc="logs", placement=Placement(tolerations="a:NoSchedule"), dry_run=True),
     "tolerations"),
    (lambda: serve("m", pvc="logs", versions="1", dry_run=True), "versions"),
    (lambda: train_tf("x", timeout="10", dry_run=True), "timeout"),
    (lambda: train_tf("x", cpu="4", dry_run=True), "cpu"),
])
def test_a_wrong_type_is_an_input_error_naming_the_argument(call: Any, argument: str) -> None:
    _refused(call, argument)


def test_a_bool_is_not_an_integer_and_an_integer_is_a_number() -> None:
    _refused(lambda: render_tf("x", max_retry=True), "max_retry")
    assert train_tf("x", timeout=10, dry_run=True).succeeded  # an int for a float parameter


@pytest.mark.parametrize("argument, value", [("max_retry", 2**63), ("max_retry", INT32_MAX + 1),
                                             ("ttl", INT32_MAX + 1)])
def test_int32_fields_are_bounded(argument: str, value: int) -> None:
    err = _refused(lambda: render_tf("x", **{argument: value}), argument)
    assert str(INT32_MAX) in err.allowed
    render_tf("x", **{argument: INT32_MAX})  # the largest value Volcano can store is fine


@pytest.mark.parametrize("flag, value", [("--max-retry", "99999999999"), ("--ttl", "99999999999999")])
def test_cli_int32_flags_are_bounded(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "tf", "--name", "x", flag, value]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"invalid {flag}=" in err and str(INT32_MAX) in err


def test_describe_reads_the_hints() -> None:
    from collections.abc import Mapping, Sequence

    from volcano_pipelines.interface.params import describe

    assert describe(int | None) == "an integer or None"
    assert describe(Mapping[str, Mapping[str, str]]) == "a mapping of strings to mappings of strings to strings"
    assert describe(Sequence[str]).startswith("a list of strings")


def test_check_types_ignores_python_only_arguments() -> None:
    from volcano_pipelines.interface.params import check_types

    def step(name: str, progress: int | None = None) -> None:
        check_types(step, locals())

    step("x", progress="an object the front ends never pass")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        step(1)  # type: ignore[arg-type]
