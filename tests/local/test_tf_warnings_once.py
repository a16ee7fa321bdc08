"""The TF2 example's chief log (issue 42): each TensorFlow warning once (item 10: its checkpoints
retrace a function and TensorFlow warns; the warning came twice, through TensorFlow's own
handler and again through a handler the distributed runtime put on the root logger), and every
progress report with the time it was printed (item 4: the step's rate and ETA come from it)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.local_jobs import FileServer, Local, replica
from tests.helpers.local_training import tf_job, wait_for_job


def test_every_tensorflow_warning_of_the_chief_is_printed_once_and_each_report_has_its_time(local: Local, examples_server: FileServer,
                                                               dataset: Path) -> None:
    result, _ = wait_for_job(local, tf_job(examples_server.url, "once", api="tf2", steps=800, checkpoint_every=100))
    assert result.succeeded, result.message
    log = Path(replica(local, "once", "once-chief-0")["log"]).read_text(errors="replace")
    warnings = [line for line in log.splitlines() if re.match(r"WARNING:tensorflow:", line)]
    assert any("retracing" in line for line in warnings), log[-3000:]  # the checkpoints' retrace warns
    assert len(warnings) == len(set(warnings)), "\n".join(warnings)
    reports = [line for line in log.splitlines() if line.startswith(("vpipe:progress ", "vpipe:checkpoint "))]
    assert reports and all(re.search(r" time=\d{10}\.\d{3}(\s|$)", line) for line in reports), reports[:5]
