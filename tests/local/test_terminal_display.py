"""`vpipe train tf --backend local` under a real pseudo-terminal (issue 42 items 1, 10, 16): the
tasks' output scrolls above one live region, each line whole; no stale or half-drawn frame is
left in the scrollback; the final progress comes before the final phase; `-q` shows none of
the tasks' output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers.local_jobs import FileServer, assert_no_leak
from tests.helpers.terminal import run_in_terminal

# The chief talks while it trains (a line every 0.1 s, a progress report every 0.5 s with its
# printed time) and finishes; the parameter server and the worker wait to be stopped.
RUN_SH = r"""#!/bin/bash
role="${1#--job_name=}"
if [ "$role" != chief ]; then echo "$role ready"; exec sleep 100000; fi
for i in $(seq 1 40); do
  echo "chief line $i"
  if [ $((i % 5)) = 0 ]; then echo "vpipe:progress step=$((i * 10)) total=400 time=$(date +%s.%N)"; fi
  sleep 0.1
done
printf 'bar 10%%\rbar 20%%\rbar 30%% done\n'
echo "vpipe:checkpoint step=400 path=/logs/ckpt-400"
echo "chief done"
"""


@pytest.fixture
def code_url(code_server: FileServer) -> str:
    (code_server.root / "run.sh").write_text(RUN_SH)
    return code_server.url


def _train(tmp_path: Path, code_url: str, *more: str) -> list[str]:
    run = run_in_terminal([sys.executable, "-m", "volcano_pipelines", "train", "tf", "--name", "tiny", "--chief",
                           "--backend", "local", "--code-url", code_url, "--local-dir", str(tmp_path / "work"),
                           "--progress-interval", "1", *more], cwd=str(tmp_path), timeout=240)
    text = "\n".join(run.lines)
    assert run.code == 0, text
    return run.lines


def test_task_output_scrolls_above_one_live_region(tmp_path: Path, code_url: str) -> None:
    try:
        lines = _train(tmp_path, code_url)
    finally:
        assert_no_leak(tmp_path, settle_seconds=10)
    text = "\n".join(lines)
    # Every line of the chief, whole and on a line of its own, in order: nothing glued to the
    # display, nothing erased by a redraw.
    chief = [line for line in lines if line.startswith("chief-0 | chief line ")]
    assert chief == [f"chief-0 | chief line {i}" for i in range(1, 41)], text
    assert "ps-0 | ps ready" in lines and "worker-0 | worker ready" in lines, text
    # A progress bar's carriage returns: what a terminal would show of its line, behind its prefix.
    assert "chief-0 | bar 30% done" in lines, text
    # One live region, drawn last: its final frame once, no stale frame of it in the scrollback.
    assert [line for line in lines if line.startswith("job tiny: ")][:1] == ["job tiny: Completed"], text
    assert not any("job tiny: Running" in line or "job tiny: Pending" in line for line in lines), text
    assert not any("vpipe-local | " in line and not line.startswith("vpipe-local | ") for line in lines), text
    final = lines.index("job tiny: Completed")
    assert "  chief   1 pod: 1 succeeded" in lines[final:final + 4], text
    # The last progress is on the bar of the final frame, not printed after "Completed".
    assert any(line.startswith("training ") and "100%" in line and "step 400/400" in line
               for line in lines[final:final + 6]), text
    assert lines[-1].startswith("job tiny: step 400/400") or "job default/tiny: Completed" in text


def test_quiet_shows_none_of_the_tasks_output(tmp_path: Path, code_url: str) -> None:
    try:
        lines = _train(tmp_path, code_url, "-q")
    finally:
        assert_no_leak(tmp_path, settle_seconds=10)
    text = "\n".join(lines)
    assert not any(" | " in line and line.split(" | ")[0] in ("chief-0", "ps-0", "worker-0") for line in lines), text
    assert any(line.startswith("job default/tiny: Completed") for line in lines), text
    # The tasks' output is still in their log files.
    [log] = (tmp_path / "work" / "logs" / "pods").rglob("tiny-chief-0*")
    assert "chief line 40" in Path(log).read_text()
