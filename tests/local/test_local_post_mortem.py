"""The local backend writes the same post-mortem record as a cluster, into its log directory:
real processes, a worker that fails with its last log lines, the restart's stopped pods."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.local_jobs import Local, RUN_SH, manifest, run_job


@pytest.fixture
def code_url(code_server: Any) -> str:
    (code_server.root / "run.sh").write_text(RUN_SH)
    return str(code_server.url)


def test_a_failing_worker_is_named_in_the_local_post_mortem(local: Local, code_url: str) -> None:
    out = run_job(local, manifest(code_url, "pmlocal", ps=1, workers=1, max_retry=2, args=("--worker=exit:3",)))
    assert out.job["status"]["state"]["phase"] == "Failed"
    saved = out.session.post_mortem([])
    path = local.log_dir / "post-mortem" / "default" / "pmlocal.json"
    assert saved["json"] == str(path) and (local.log_dir / "post-mortem" / "default" / "pmlocal.md").is_file()
    record = json.loads(path.read_text())
    assert record["bytes"] == path.stat().st_size
    # Both attempts of both pods, each once.
    names = sorted(p["name"] for p in record["pods"])
    assert names == ["pmlocal-ps-0", "pmlocal-ps-0", "pmlocal-worker-0", "pmlocal-worker-0"], names
    workers = [p for p in record["pods"] if p["name"] == "pmlocal-worker-0"]
    assert all(p["failed"] and p["outcome"] == "exit code 3" for p in workers), workers
    assert any("exiting with 3" in line for p in workers for c in p["containers"] for line in c["log"])
    ps = [p for p in record["pods"] if p["name"] == "pmlocal-ps-0"]
    assert all(p["outcome"] == "stopped by the job" and not p["failed"] for p in ps), ps
