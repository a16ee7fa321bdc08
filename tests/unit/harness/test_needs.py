"""The skip-or-fail decision for tests whose real system cannot be had."""

from __future__ import annotations

import pytest

from tests.needs import skip_or_fail, unavailable


@pytest.mark.parametrize("value", ["true", "TRUE", "True", "1", "yes", " true\n"])
def test_ci_runs_fail(value: str) -> None:
    assert skip_or_fail({"CI": value}) == "fail"


@pytest.mark.parametrize("env", [{}, {"CI": ""}, {"CI": "false"}, {"CI": "0"}, {"CI": "no"}, {"NOT_CI": "true"}])
def test_everything_else_skips(env: dict[str, str]) -> None:
    assert skip_or_fail(env) == "skip"


def test_unavailable_skips_outside_ci_with_the_reason() -> None:
    with pytest.raises(pytest.skip.Exception) as info:
        unavailable("GlusterFS: glusterd not installed", env={})
    assert str(info.value) == "GlusterFS: glusterd not installed"


def test_unavailable_fails_in_ci_naming_the_reason() -> None:
    with pytest.raises(pytest.fail.Exception) as info:
        unavailable("GlusterFS: glusterd not installed", env={"CI": "true"})
    assert "GlusterFS: glusterd not installed" in str(info.value)
    assert not isinstance(info.value, pytest.skip.Exception)


def test_the_default_environment_is_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert skip_or_fail() == "fail"
    monkeypatch.delenv("CI")
    assert skip_or_fail() == "skip"


def test_a_missing_module_fails_in_ci_and_skips_elsewhere() -> None:
    from tests.needs import module

    assert module("json", "never missing").dumps([]) == "[]"
    with pytest.raises(pytest.fail.Exception, match="no-such-extra.*CI=true"):
        module("volcano_pipelines_no_such_module", "no-such-extra", env={"CI": "true"})
    with pytest.raises(pytest.skip.Exception, match="no-such-extra"):
        module("volcano_pipelines_no_such_module", "no-such-extra", env={})


def test_kfp_tests_use_the_ci_aware_check_not_importorskip() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = [str(path.relative_to(root)) for path in root.rglob("test_*.py")
                 if "importorskip(" in path.read_text(encoding="utf-8") and path.name != Path(__file__).name]
    assert offenders == []
