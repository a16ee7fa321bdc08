"""Values the CLI let through (issue 33, item 12), each refused before anything is read, sent
or written: exit 2, the flag the user typed, the value, what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from volcano_pipelines.cli import main


def _err(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("flag", ["--worker-cpu", "--ps-memory", "--ps-cpu"])
def test_a_quantity_no_scheduler_can_count_is_refused(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    code, out, err = _err(capsys, "render", "tf", "--name", "j", flag, "1e400")
    assert code == 2 and out == "", err
    assert err.startswith(f"vpipe: error: invalid {flag}='1e400': a quantity of at most"), err


def test_a_large_but_countable_quantity_renders(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _err(capsys, "render", "tf", "--name", "j", "--worker-cpu", "9e15")
    assert code == 0 and "9e15" in out, err


def test_the_quantity_limit_is_what_64_bits_of_thousandths_hold(capsys: pytest.CaptureFixture[str]) -> None:
    """The boundary itself (a mutant multiplying the limit by 1000 passed the 1e400 test)."""
    code, _, err = _err(capsys, "render", "tf", "--name", "j", "--worker-cpu", "9223372036854776")
    assert code == 2 and "invalid --worker-cpu='9223372036854776'" in err, err
    code, _, err = _err(capsys, "render", "tf", "--name", "j", "--worker-cpu", "9223372036854775")
    assert code == 0, err


def test_tensorboard_job_and_ttl_exclude_each_other(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = _err(capsys, "tensorboard", "--name", "tb", "--log-pvc", "logs", "--job", "j", "--ttl", "10",
                        "--kubeconfig", str(tmp_path / "none"))  # no server is asked: refused first
    assert code == 2, err
    assert "invalid --ttl=10" in err and "not both" in err, err


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}").write_text(str(i))
    return src


@pytest.mark.parametrize(("extra", "flag"), [
    (["--max-delete", "5"], "--max-delete='5'"),
    (["--force-delete"], "--force-delete"),  # a switch: named alone, not `--force-delete=True`
])
def test_delete_options_without_delete_are_refused(capsys: pytest.CaptureFixture[str], tree: Path,
                                                   extra: list[str], flag: str) -> None:
    dst = tree.parent / "dst"
    code, _, err = _err(capsys, "sync", str(tree), str(dst), "-q", *extra)
    assert code == 2, err
    assert f"vpipe: error: invalid {flag}: only with --delete" in err, err
    assert not dst.exists()


def test_an_unclosed_bracket_glob_is_refused(capsys: pytest.CaptureFixture[str], tree: Path) -> None:
    dst = tree.parent / "dst"
    code, _, err = _err(capsys, "sync", str(tree), str(dst), "-q", "--include", "[")
    assert code == 2 and "invalid --include='['" in err, err
    assert not dst.exists()


def test_a_literal_bracket_glob_still_selects(capsys: pytest.CaptureFixture[str], tree: Path) -> None:
    (tree / "[x").write_text("x")
    dst = tree.parent / "dst"
    code, _, err = _err(capsys, "sync", str(tree), str(dst), "-q", "--include", "[[]x")
    assert code == 0, err
    assert sorted(p.name for p in dst.iterdir() if not p.name.startswith(".")) == ["[x"]


def test_more_shards_than_a_job_has_workers_are_refused(capsys: pytest.CaptureFixture[str], tree: Path) -> None:
    dst = tree.parent / "dst"
    code, _, err = _err(capsys, "sync", str(tree), str(dst), "-q", "--shards", "100000")
    assert code == 2 and "invalid --shards=100000" in err, err
    assert not dst.exists()


def test_quiet_prints_one_line_for_the_shard_manifests(capsys: pytest.CaptureFixture[str], tree: Path) -> None:
    dst = tree.parent / "dst"
    code, out, err = _err(capsys, "sync", str(tree), str(dst), "-q", "--shards", "3")
    assert code == 0, err
    assert len(out.splitlines()) == 2 and out.splitlines()[1].startswith("shard manifests: 3 in "), out
    assert len(list((dst / ".vpipe" / "shards").glob("shard-*"))) == 3


@pytest.mark.parametrize("below", ["", "sub", "sub/deeper"])
def test_a_destination_at_or_below_a_file_is_bad_input(capsys: pytest.CaptureFixture[str], tree: Path,
                                                       below: str) -> None:
    afile = tree.parent / "afile"
    afile.write_text("keep")
    dst = afile / below if below else afile
    code, _, err = _err(capsys, "sync", str(tree), str(dst), "-q")
    assert code == 2, err
    assert f"invalid DST={str(dst)!r}" in err
    assert afile.read_text() == "keep"


@pytest.mark.parametrize("value", ["-1", "10001"])
def test_status_log_lines_is_checked_before_the_server_is_asked(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                                value: str) -> None:
    # Checked before the kubeconfig is read: this one does not exist, which is refused naming --kubeconfig.
    code, _, err = _err(capsys, "status", "j", "--log-lines", value, "--kubeconfig", str(tmp_path / "none"))
    assert code == 2 and f"invalid --log-lines={int(value)}" in err, err


def test_status_usage_lists_log_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["status", "--help"])
    assert "--log-lines N" in capsys.readouterr().out.splitlines()[0]


def test_an_error_shows_a_whole_number_as_typed_and_keeps_fractions() -> None:
    from volcano_pipelines.errors import InputError

    assert str(InputError("--ttl", 10.0, "x")) == "invalid --ttl=10: x"
    assert str(InputError("--ttl", 2.5, "x")) == "invalid --ttl=2.5: x"
    assert str(InputError("--worker-cpu", float("inf"), "x")) == "invalid --worker-cpu=inf: x"
    # The Python API's keyword keeps its value: only a flag (leading '-') is named alone.
    assert str(InputError("force_delete", True, "x")) == "invalid force_delete=True: x"
    assert str(InputError("--force-delete", True, "x")) == "invalid --force-delete: x"


def test_the_shards_help_states_the_limit_the_step_enforces() -> None:
    from volcano_pipelines.steps._sync import MAX_SHARDS
    from volcano_pipelines.steps import sync

    assert f"up to {MAX_SHARDS}" in (sync.__doc__ or "") and "no more than the\n            files selected" in (sync.__doc__ or "")


@pytest.mark.parametrize(("shards", "refused_by"), [
    ("1000", "at most the number of files selected"),  # the limit itself passes the range check
    ("1001", "a count up to 1000"),
])
def test_the_shards_limit_is_inclusive(capsys: pytest.CaptureFixture[str], tree: Path, shards: str,
                                       refused_by: str) -> None:
    dst = tree.parent / "dst"
    code, _, err = _err(capsys, "sync", str(tree), str(dst), "-q", "--shards", shards)
    assert code == 2 and f"invalid --shards={shards}" in err and refused_by in err, err
    assert not dst.exists()
