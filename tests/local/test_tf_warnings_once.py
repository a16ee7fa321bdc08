"""The TF2 example prints each TensorFlow warning once (issue 42 item 10): its checkpoints
retrace a function and TensorFlow warns; the warning came twice, through TensorFlow's own
handler and again through a handler the distributed runtime put on the root logger."""

from __future__ import annotations

import re
from pathlib import Path

from tests.local.conftest import FileServer, Local, replica
from tests.local.test_local_progress import tf_job, wait_for_job


def test_every_tensorflow_warning_of_the_chief_is_printed_once(local: Local, examples_server: FileServer,
                                                               dataset: Path) -> None:
    result, _ = wait_for_job(local, tf_job(examples_server.url, "once", api="tf2", steps=800, checkpoint_every=100))
    assert result.succeeded, result.message
    log = Path(replica(local, "once", "once-chief-0")["log"]).read_text(errors="replace")
    warnings = [line for line in log.splitlines() if re.match(r"WARNING:tensorflow:", line)]
    assert any("retracing" in line for line in warnings), log[-3000:]  # the checkpoints' retrace warns
    assert len(warnings) == len(set(warnings)), "\n".join(warnings)
