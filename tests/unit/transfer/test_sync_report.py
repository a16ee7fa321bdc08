"""What `vpipe sync` prints (issue 42, items 17 and 18): `--json` laid out as every command's
(`vpipe train --json`: keys sorted, indent 2) with `dst` absolute on errors too; a dry run onto a
destination that refuses writes says what the real run says (exit 3) instead of "would copy";
a refused `--delete` prints no report that reads as work done. Through the real CLI, on real
directories (a read-only bind mount where the test may make one)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.trees import write_tree
from tests.needs import unavailable
from volcano_pipelines.cli import main


def _sync(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["sync", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _layout_of_every_command(out: str) -> dict:  # type: ignore[type-arg]
    report = json.loads(out)
    assert out == json.dumps(report, indent=2, sort_keys=True) + "\n"
    return report  # type: ignore[no-any-return]


def test_json_is_laid_out_like_trains_and_names_dst_absolute_on_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path / "src", {"a": b"a", "b/c": b"c"})
    code, out, _ = _sync(capsys, "src", "dst", "--json", "-q")
    report = _layout_of_every_command(out)
    assert code == 0 and report["copied"] == 2
    assert (report["src"], report["dst"]) == (f"file://{tmp_path}/src", f"{tmp_path}/dst")
    code, out, err = _sync(capsys, "missing", "dst2", "--json", "-q")  # fails before the engine's report exists
    report = _layout_of_every_command(out)
    assert code == 2 and "invalid SRC=" in report["error"]
    assert (report["src"], report["dst"]) == (f"file://{tmp_path}/missing", f"{tmp_path}/dst2")


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        unavailable("needs root for a read-only bind mount")
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro}", shell=True).returncode != 0:
        unavailable("cannot make a read-only bind mount here")
    try:
        yield ro
    finally:
        subprocess.run(["umount", str(ro)], check=False)


@pytest.mark.parametrize("below", ["", "new/sub"], ids=["the-destination", "a-directory-to-create-in-it"])
def test_a_dry_run_onto_a_read_only_destination_says_what_the_real_run_says(read_only: Path, below: str, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path / "src", {f"f{i}": b"x" for i in range(13)})
    dst = str(read_only / below) if below else str(read_only)
    code, out, err = _sync(capsys, str(tmp_path / "src"), dst, "-q")
    assert code == 3
    real = err.strip()
    assert real.startswith("vpipe: error: destination not writable while ") and "Read-only file system" in real
    code, out, err = _sync(capsys, str(tmp_path / "src"), dst, "--dry-run", "-q")
    assert code == 3, out  # before: "dry run: would copy 13", exit 0
    assert err.strip() == real and "would copy" not in out
    code, out, err = _sync(capsys, str(tmp_path / "src"), dst, "--dry-run", "--json", "-q")
    assert code == 3 and f"vpipe: error: {json.loads(out)['error']}" == real
    assert list(read_only.iterdir()) == []


def test_a_refused_delete_prints_no_report_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tree(tmp_path / "full", {f"x/f{i}": b"x" for i in range(6)})
    (tmp_path / "empty").mkdir()
    dst = tmp_path / "dst"
    assert _sync(capsys, str(tmp_path / "full"), str(dst), "-q")[0] == 0
    for extra in ((), ("--dry-run",)):
        code, out, err = _sync(capsys, str(tmp_path / "empty"), str(dst), "--delete", "-q", *extra)
        assert code == 2 and "refusing to delete all 6 file(s)" in err
        assert out == "", out  # before: "sync ...: copied 0, skipped 0, deleted 0, ..." then the refusal
    code, out, err = _sync(capsys, str(tmp_path / "empty"), str(dst), "--delete", "--json", "-q")
    report = json.loads(out)  # --json: the report comes, saying it was refused
    assert code == 2 and report["ok"] is False and "refusing to delete all 6 file(s)" in report["error"]
    assert len(list((dst / "x").iterdir())) == 6
