"""A local job stopped (Ctrl-C's delete, an abort, a restart) stops its coordinator first
(issue 42 item 9): the TF chief gets its SIGTERM while the parameter servers and workers it
needs still run, so it can write its checkpoint; the others are stopped once it is gone."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers.local_jobs import FileServer, Local, manifest

# The chief notes, on SIGTERM, whether the parameter server and the worker still run.
RUN_SH = r"""#!/bin/bash
role="${1#--job_name=}"
for arg in "$@"; do case "$arg" in --log_dir=*) log_dir="${arg#--log_dir=}" ;; esac; done
mkdir -p "$log_dir"
if [ "$role" != chief ]; then echo $$ > "$log_dir/$role.pid"; exec sleep 100000; fi
peers() {
  for peer in ps worker; do
    if kill -0 "$(cat "$log_dir/$peer.pid")" 2>/dev/null; then echo "$peer running"; else echo "$peer gone"; fi
  done > "$log_dir/at-chief-sigterm"
  exit 143
}
trap peers TERM
touch "$log_dir/chief.ready"
while :; do sleep 0.1; done
"""


@pytest.fixture
def code_url(code_server: FileServer) -> str:
    (code_server.root / "run.sh").write_text(RUN_SH)
    return code_server.url


@pytest.mark.parametrize("how", ["delete", "abort"])
def test_the_chief_is_stopped_while_its_peers_still_run(local: Local, code_url: str, how: str) -> None:
    job, _ = local.backend.submit(manifest(code_url, f"order-{how}", chief=True))
    local.jobs.append(("default", f"order-{how}"))
    deadline = time.monotonic() + 120
    while not all((local.log_dir / name).exists() for name in ("ps.pid", "worker.pid", "chief.ready")):
        assert time.monotonic() < deadline, local.output.text()[-3000:]
        time.sleep(0.1)
    with local.backend.session(job, log_lines=5) as session:
        if how == "delete":
            session.delete()
        else:
            session.abort("StepCancelled")
    assert (local.log_dir / "at-chief-sigterm").read_text().split("\n")[:2] == ["ps running", "worker running"]
    # ... and then the peers were stopped too.
    pids = [int((local.log_dir / f"{peer}.pid").read_text()) for peer in ("ps", "worker")]
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
