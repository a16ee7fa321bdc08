"""The golden-file check cannot be turned green by the environment: VPIPE_UPDATE_GOLDEN=1
rewrites a stale copy but the test still fails, and under CI=true nothing is rewritten."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden_files import UPDATE_ENV, check_golden


def test_a_fresh_copy_passes_whatever_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("x: 1\n")
    for env in ({}, {UPDATE_ENV: "1"}, {UPDATE_ENV: "1", "CI": "true"}):
        check_golden(path, "x: 1\n", env)


def test_a_stale_copy_fails_and_is_not_touched(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("x: 1\n")
    with pytest.raises(AssertionError, match="differs from what is rendered now"):
        check_golden(path, "x: 2\n", {})
    assert path.read_text() == "x: 1\n"


def test_update_rewrites_and_still_fails(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "a.yaml"
    with pytest.raises(AssertionError, match="has been rewritten"):
        check_golden(path, "x: 2\n", {UPDATE_ENV: "1"})
    assert path.read_text() == "x: 2\n"
    check_golden(path, "x: 2\n", {UPDATE_ENV: "1"})  # the rerun passes


def test_update_is_ignored_in_ci(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text("x: 1\n")
    with pytest.raises(AssertionError, match="differs"):
        check_golden(path, "x: 2\n", {UPDATE_ENV: "1", "CI": "true"})
    assert path.read_text() == "x: 1\n"
