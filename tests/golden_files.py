"""The golden-file mechanism: a rendered artifact is compared with its committed copy under
tests/golden/ (or any path given); `VPIPE_UPDATE_GOLDEN=1` rewrites a stale copy (and still
fails, so that it is reviewed and the run repeated). The
KFP and Argo artifacts use the same helper."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path

from tests.needs import skip_or_fail

UPDATE_ENV = "VPIPE_UPDATE_GOLDEN"
GOLDEN_DIR = Path(__file__).parent / "golden"


def check_golden(path: Path, text: str, env: Mapping[str, str] | None = None) -> None:
    """Passes only when the committed copy is `text`. With VPIPE_UPDATE_GOLDEN=1 a stale copy
    is rewritten and the test still fails (a variable left in the environment must not turn
    stale files into a green run); in CI it is never rewritten."""
    env = os.environ if env is None else env
    if path.is_file() and path.read_text() == text:
        return
    if env.get(UPDATE_ENV) == "1" and skip_or_fail(env) != "fail":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        raise AssertionError(f"{path} was stale and has been rewritten ({UPDATE_ENV}=1): review the change, then "
                             f"rerun without {UPDATE_ENV}")
    if not path.exists():
        raise AssertionError(f"{path} does not exist; run with {UPDATE_ENV}=1 to create it")
    expected = path.read_text()
    if expected != text:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "rendered"))
        raise AssertionError(f"{path} differs from what is rendered now (rerun with {UPDATE_ENV}=1 if the change "
                             f"is intended):\n{diff[:6000]}")
