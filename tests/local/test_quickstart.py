"""The README's first command, end to end: scripts/quickstart's program makes a dataset, syncs
it with the real engine, trains it with real TensorFlow on the local backend (1 ps + 2 workers
+ chief), starts TensorBoard over the logs and makes one prediction from the export."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def test_quickstart_runs_the_whole_workflow(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(QUICKSTART), "--workdir", str(tmp_path / "work")], capture_output=True,
                          text=True, timeout=900, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert re.search(r"job +default/quickstart: Completed in [\d.]+s, 0 restart\(s\)", out), out
    assert "chief: 1 succeeded" in out and "ps: stopped by CompleteJob" in out
    linger = re.search(r"parameter server outlived the chief by ([\d.]+)s", out)
    assert linger and float(linger.group(1)) > 0
    assert re.search(r"prediction +label [01]: probability (0|1)\.\d+", out)
    assert re.search(r"TensorBoard +http://127\.0\.0\.1:\d+/", out)
    export = re.search(r"model +(\S+) \(version (\d+)\)", out)
    assert export and (Path(export.group(1)) / "saved_model.pb").is_file()
    synced = (tmp_path / "work" / "data")
    assert sorted(p.name for p in synced.glob("train-*.tfrecord")) == [f"train-0000{i}-of-00004.tfrecord" for i in range(4)]
    # The tasks' output went to the log, prefixed by task and index.
    assert re.search(r"^chief-0 \| ", proc.stderr, re.M) and re.search(r"^ps-0 \| ", proc.stderr, re.M)


def test_quickstart_render_prints_the_same_job_as_yaml() -> None:
    proc = subprocess.run([sys.executable, str(QUICKSTART), "--render", "--code-url", "http://files/tf-ps/"],
                          capture_output=True, text=True, timeout=120, check=True)
    job = yaml.safe_load(proc.stdout)
    assert job["kind"] == "Job" and job["metadata"]["name"] == "quickstart"
    assert {t["name"]: t["replicas"] for t in job["spec"]["tasks"]} == {"chief": 1, "ps": 1, "worker": 2}
