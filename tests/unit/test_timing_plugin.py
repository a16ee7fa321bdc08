"""The per-folder timing summary's folder names (tests/helpers/timing.py)."""

from __future__ import annotations

from tests.helpers.timing import folder_of


def test_a_test_counts_for_its_top_folder_under_tests() -> None:
    assert folder_of("tests/unit/cli/test_x.py::test_y[a/b]") == "tests/unit"
    assert folder_of("tests/node/test_resume.py::test_z") == "tests/node"
    assert folder_of("tests/test_top.py::test_t") == "tests/test_top.py"
