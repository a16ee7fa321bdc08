"""How the training's reported progress is shown: a bar under the task table on a terminal,
one timestamped line per change in logs."""

from __future__ import annotations

import io
import re

import pytest

from volcano_pipelines.cli.progress import RichProgress
from volcano_pipelines.progress import LineProgress
from volcano_pipelines.volcano.report_lines import TrainingProgress
from volcano_pipelines.volcano.status import JobStatus, TaskCounts

STATE = TrainingProgress(step=2400, total=6000, loss=0.1512, examples_per_second=3556.6, eta_seconds=23,
                         checkpoint_step=2000, resumed_from_step=700)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_terminal_shows_a_bar_with_the_figures_under_the_task_table() -> None:
    screen = Terminal()
    progress = RichProgress(screen)
    progress.console.width = 120
    progress.job("demo", JobStatus("Running", tasks={"chief": TaskCounts(running=1)}), None)
    progress.training("demo", STATE)
    progress.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    last = text[text.rindex("job demo: Running"):]  # the final frame
    assert "chief" in last and "40%" in last
    assert "step 2400/6000, 3556.6 ex/s, loss 0.1512, ETA 23s, ckpt 2000, resumed from 700" in last
    assert last.index("chief") < last.index("step 2400/6000")


def test_logs_get_one_line_per_change() -> None:
    stream = io.StringIO()
    LineProgress(stream).training("demo", STATE)
    line = stream.getvalue()
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d job demo: step 2400/6000 \(40\.0%\), 3556\.6 examples/s, "
                    r"loss 0\.1512, ETA 23s, checkpoint at step 2000, resumed from step 700\n$", line), line


def test_the_result_says_what_the_training_reported_or_that_it_reported_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    from volcano_pipelines.cli.train import _report
    from volcano_pipelines.steps import TrainResult

    done = TrainResult(name="demo", namespace="ml", run_id="r", phase="Completed", succeeded=True, retries=1,
                       progress={"step": 6000, "total": 6000, "loss": 0.05, "examples_per_second": 5138.4},
                       last_checkpoint={"step": 6000, "path": "/logs/ckpt-6000"}, resumed_from_step=1350)
    _report(done, as_json=False)
    assert ("job demo: step 6000/6000 (100.0%), 5138.4 examples/s, loss 0.05, checkpoint at step 6000, "
            "resumed from step 1350") in capsys.readouterr().out
    _report(TrainResult(name="demo", namespace="ml", run_id="r", phase="Completed", succeeded=True), as_json=False)
    assert "job demo: no progress reported" in capsys.readouterr().out
    # Submitted without waiting: nothing is known yet, and nothing is said about it.
    _report(TrainResult(name="demo", namespace="ml", run_id="r", phase="Pending", succeeded=False), as_json=False)
    assert "progress" not in capsys.readouterr().out


def test_task_output_keeps_its_colours_but_not_its_cursor_moves() -> None:
    from tests.helpers.terminal import replay

    screen = Terminal()
    progress = RichProgress(screen)
    progress.console.width = 100
    progress.job("demo", JobStatus("Running", tasks={"chief": TaskCounts(running=1)}), None)
    progress.output("chief-0 | \x1b[31mred\x1b[0m text")
    progress.output("chief-0 | 30% \x1b[1mdone\x1b[0m\x07")
    progress.output("chief-0 | up\x1b[2A\x1b[2Kerased?")
    progress.close()
    raw = screen.getvalue()
    lines = [line for line in replay(raw.encode(), 100) if line]
    assert "chief-0 | red text" in lines and "chief-0 | 30% done" in lines, lines
    assert "chief-0 | uperased?" in lines, lines
    assert lines[-2:] == ["job demo: Running", "  chief  1 pod: 1 running"], lines
    assert "\x1b[31m" in raw or "\x1b[0;31m" in raw or "31m" in raw  # the colour reached the terminal
