"""lifecycle/tfserving.py beyond test_serve_model's documented examples (found by
scripts/mutation): error codes and their rendering, which states count, what each readiness
answer carries (served versions, failed vs waiting), and the export layout's edge rules."""

from __future__ import annotations

import pytest

from volcano_pipelines.lifecycle.tfserving import (
    VersionStatus,
    check_export_layout,
    model_readiness,
    parse_model_status,
    versions_to_prune,
)


def entry(version: object, state: str | None = "AVAILABLE", **status: object) -> dict[str, object]:
    out: dict[str, object] = {"version": version}
    if state is not None:
        out["state"] = state
    if status:
        out["status"] = status
    return out


@pytest.mark.parametrize("code, message, error", [
    ("OK", "", None), ("", "", None), ("0", "", None), (0, "", None),
    ("NOT_FOUND", "", "NOT_FOUND"), ("OK", "disk full", "OK: disk full"), ("UNKNOWN", "x", "UNKNOWN: x"),
])
def test_version_error(code: object, message: str, error: str | None) -> None:
    assert VersionStatus(1, "END", error_code=code, error_message=message).error == error  # type: ignore[arg-type]


def test_parse_fills_defaults_and_reads_numbers() -> None:
    [v] = parse_model_status({"model_version_status": [entry(" 3 ".strip(), None)]})
    assert (v.version, v.state, v.error_code, v.error_message, v.error) == (3, "UNKNOWN", "OK", "", None)
    [w] = parse_model_status({"model_version_status": [entry(4, "END", error_code=13, error_message=None)]})
    assert (w.error_code, w.error_message, w.error) == ("13", "", "13")
    assert parse_model_status({"model_version_status": None}) == []
    with pytest.raises(ValueError):
        parse_model_status({"model_version_status": [entry(None)]})
    with pytest.raises(TypeError):
        parse_model_status({"model_version_status": "1"})


def body(*entries: dict[str, object]) -> dict[str, object]:
    return {"model_version_status": list(entries)}


def test_readiness_details() -> None:
    two = body(entry("2", "AVAILABLE"), entry("1", "AVAILABLE"), entry("3", "LOADING"))
    state = model_readiness(two)
    assert state.ready and not state.failed and state.served == (1, 2) and state.message == "version(s) 1, 2 AVAILABLE"
    wanted = model_readiness(two, want=[2, 1])
    assert wanted.ready and wanted.served == (1, 2) and wanted.message == "version(s) 2, 1 AVAILABLE"
    waiting = model_readiness(two, want=[3, 4])
    assert not waiting.ready and not waiting.failed and waiting.served == (1, 2)
    assert waiting.message == "waiting for version(s) 3, 4 (states 1: AVAILABLE, 2: AVAILABLE, 3: LOADING)"
    # An error on a version still loading fails it; an error on an AVAILABLE one does not.
    erred = model_readiness(body(entry("5", "LOADING", error_code="INTERNAL", error_message="oom")), want=[5])
    assert erred.failed and not erred.ready and erred.message == "version 5 failed to load: INTERNAL: oom"
    ok = model_readiness(body(entry("5", "AVAILABLE", error_code="INTERNAL", error_message="old")), want=[5])
    assert ok.ready and not ok.failed
    ended = model_readiness(body(entry("6", "END")), want=[6])
    assert ended.failed and ended.message == "version 6 failed to load: END"
    unwanted_end = model_readiness(body(entry("6", "END"), entry("7", "LOADING")), want=[7])
    assert not unwanted_end.failed and not unwanted_end.ready


def test_readiness_without_a_wanted_version() -> None:
    loading = model_readiness(body(entry("1", "LOADING"), entry("2", "END")))
    assert not loading.ready and not loading.failed and loading.served == ()
    assert loading.message == "waiting for a version to load (states 1: LOADING, 2: END)"
    ended = model_readiness(body(entry("1", "END"), entry("2", "END", error_code="NOT_FOUND", error_message="no graph")))
    assert ended.failed and ended.message == "no version could be loaded (2: NOT_FOUND: no graph)"
    quiet = model_readiness(body(entry("1", "END")))
    assert quiet.failed and quiet.message == "no version could be loaded (1: END)"
    empty = model_readiness({"model_version_status": []})
    assert not empty.ready and not empty.failed and empty.message == "no version loaded yet"
    broken = model_readiness({"model_version_status": [entry("x")]})
    assert not broken.ready and not broken.failed and broken.message.startswith("unexpected model status answer: ")
    assert model_readiness(body(entry("1", "AVAILABLE")), want=[]).ready  # an empty want: any version


def test_export_layout_edges() -> None:
    pbtxt_at_root = check_export_layout("/m/", {"saved_model.pbtxt": None})
    assert not pbtxt_at_root.ok and "holds saved_model.pbtxt directly" in pbtxt_at_root.problems[0]
    assert "/m/1/" in pbtxt_at_root.problems[0] and "/m//1/" not in pbtxt_at_root.problems[0]
    files_only = check_export_layout("/m", {"notes.txt": None})
    assert not files_only.ok and "has no version directories" in files_only.problems[0]
    assert files_only.versions == () and files_only.warnings == ()
    longest = "1" * 18
    assert check_export_layout("/m", {longest: ["saved_model.pb"]}).versions == (int(longest),)
    too_long = check_export_layout("/m", {"1" * 19: ["saved_model.pb"]})
    assert not too_long.ok and too_long.versions == ()
    assert not check_export_layout("/m", {"\u0661": ["saved_model.pb"]}).ok  # an Arabic-Indic digit is no version
    mixed = check_export_layout("/m/", {"2": ["saved_model.pb"], "10": ["variables"], "1": ["saved_model.pb"], "x": []})
    assert mixed.versions == (1, 2, 10) and mixed.problems == ("/m/10 has no saved_model.pb (an unfinished or failed export?)",)
    assert mixed.warnings == ("/m/ also holds x: not numbered, ignored by TF Serving",)
    dup = check_export_layout("/m", {"7": ["saved_model.pb"], "07": ["saved_model.pb"]})
    assert dup.problems == ("version 7 appears as 07 and 7",) and dup.versions == (7,)
    assert check_export_layout("/m", {"3": None, "4": ["saved_model.pb"]}).versions == (4,)  # a file named 3 is no version


def test_prune_edges() -> None:
    assert versions_to_prune([5, 1, 3], keep=1) == [1, 3]
    assert versions_to_prune([1, 2, 3], keep=1, protect=[2, 9]) == [1]
    assert versions_to_prune([1, 2, 3], keep=-1) == []
    assert versions_to_prune([], keep=1) == []


@pytest.mark.parametrize("answer, want, flags", [
    ({"model_version_status": "1"}, None, (False, False, ())),  # not this format
    ({"model_version_status": []}, None, (False, False, ())),  # nothing loaded yet
    (body(entry("1", "AVAILABLE"), entry("2", "END")), [2], (False, True, (1,))),  # the wanted one ended
    (body(entry("1", "AVAILABLE"), entry("2", "LOADING")), [2], (False, False, (1,))),  # still loading
    (body(entry("1", "AVAILABLE"), entry("2", "AVAILABLE")), [2], (True, False, (1, 2))),
    (body(entry("1", "AVAILABLE")), None, (True, False, (1,))),
    (body(entry("1", "END")), None, (False, True, ())),  # nothing could be loaded
    (body(entry("1", "LOADING")), None, (False, False, ())),
])
def test_each_readiness_answer_is_exactly_ready_failed_and_served(answer: object, want: list[int] | None,
                                                                   flags: tuple[bool, bool, tuple[int, ...]]) -> None:
    """serve() reads these as booleans and a tuple of versions (list(served) on every path)."""
    state = model_readiness(answer, want)
    assert (state.ready, state.failed, state.served) == flags


@pytest.mark.parametrize("answer, problem", [
    (["model_version_status"], "a JSON object, not list"),
    ({"model_version_status": "1"}, "model_version_status is not a list"),
    ({"model_version_status": ["1"]}, "a model_version_status entry is not an object"),
    ({"model_version_status": [{"version": "v1"}]}, "version 'v1' is not an integer"),
])
def test_an_answer_in_another_format_says_what_is_wrong(answer: object, problem: str) -> None:
    assert model_readiness(answer).message == f"unexpected model status answer: {problem}"


def test_a_waiting_message_shows_each_versions_error() -> None:
    state = model_readiness(body(entry("1", "LOADING", error_code="INTERNAL", error_message="retrying")))
    assert state.message == "waiting for a version to load (states 1: LOADING (INTERNAL: retrying))"


def test_layout_problems_in_version_order_and_no_versions_when_missing() -> None:
    layout = check_export_layout("/m", {"10": ["variables"], "9": ["variables"]})
    assert [p.split(" ")[0] for p in layout.problems] == ["/m/9", "/m/10"]
    assert check_export_layout("/m", None).versions == ()
