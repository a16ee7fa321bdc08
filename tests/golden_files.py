"""The golden-file mechanism: a rendered artifact is compared with its committed copy under
tests/golden/ (or any path given); `VPIPE_UPDATE_GOLDEN=1` rewrites the copies instead. The
KFP and Argo artifacts use the same helper."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

UPDATE_ENV = "VPIPE_UPDATE_GOLDEN"
GOLDEN_DIR = Path(__file__).parent / "golden"


def check_golden(path: Path, text: str) -> None:
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        raise AssertionError(f"{path} does not exist; run with {UPDATE_ENV}=1 to create it")
    expected = path.read_text()
    if expected != text:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "rendered"))
        raise AssertionError(f"{path} differs from what is rendered now (rerun with {UPDATE_ENV}=1 if the change "
                             f"is intended):\n{diff[:6000]}")
