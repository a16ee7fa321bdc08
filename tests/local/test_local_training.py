"""Real training through the local backend: the examples/ code fetched over HTTP by the
rendered jobs' own container scripts, tensorflow-cpu parameter servers / workers / chief and
mpiexec ranks as real processes. Few and small on purpose (CI has two cores)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.helpers.local_jobs import FileServer, Local, alive, replica, run_job
from tests.helpers.local_training import _mpi_example
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Role, TFJobSpec
from volcano_pipelines.volcano.tf import build_tf_job

STEPS = 200
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def tf_job(url: str, name: str, *, api: str, chief: bool) -> dict:
    spec = TFJobSpec(
        job=JobOptions(name=name, max_retry=1),  # no restarts: a failure shows at once
        code=CodeSource(url=url + "tf-ps/"),
        ps=Role(replicas=1, env=QUIET_TF),
        worker=Role(replicas=2, env=QUIET_TF),
        chief=Role(env=QUIET_TF) if chief else None,
        args=(f"--api={api}", f"--steps={STEPS}", "--threads=1", "--log_every=50", "--checkpoint_every=100"),
    )
    return build_tf_job(spec)


def check_outputs(local: Local, api: str) -> dict:
    """metrics.json, the SavedModel at <log_dir>/export/<model>/<integer version>/,
    checkpoints and TensorBoard events."""
    metrics = json.loads((local.log_dir / "metrics.json").read_text())
    assert metrics["api"] == api and metrics["global_step"] >= STEPS
    assert metrics["final_loss"] < metrics["initial_loss"]  # it learned
    export = local.log_dir / "export" / "tiny" / str(metrics["global_step"])
    assert Path(metrics["export"]) == export
    assert (export / "saved_model.pb").is_file() and any((export / "variables").glob("variables.data-*"))
    assert [p.name for p in (local.log_dir / "export" / "tiny").iterdir() if not p.name.startswith(".")] == [export.name]
    assert list((local.log_dir / "checkpoints").glob("*.index"))
    assert list((local.log_dir / "train").glob("events.out.tfevents.*"))
    return metrics


def test_tf2_parameter_server_strategy(local: Local, examples_server: FileServer, dataset: Path) -> None:
    out = run_job(local, tf_job(examples_server.url, "tf2", api="tf2", chief=True))
    assert out.job["status"]["state"]["phase"] == "Completed", local.output.text()[-4000:]
    assert out.job["status"]["retryCount"] == 0
    chief = replica(local, "tf2", "tf2-chief-0")
    assert chief["exit_code"] == 0 and chief["stopped_by"] is None
    # The hang: parameter servers and workers (server.join()) still ran after the chief exited,
    # until the chief's TaskCompleted -> CompleteJob stopped them.
    for pod in ("tf2-ps-0", "tf2-worker-0", "tf2-worker-1"):
        r = replica(local, "tf2", pod)
        assert r["stopped_by"] == "CompleteJob" and r["finished_at"] > chief["finished_at"] and not alive(r["pid"])
    ps = replica(local, "tf2", "tf2-ps-0")
    assert out.linger is not None and out.linger > 0
    assert abs(out.linger - (ps["finished_at"] - chief["finished_at"])) < 1e-6
    metrics = check_outputs(local, "tf2")
    assert metrics["workers"] == 2
    assert any(line.startswith("chief-0 | ") and "chief: done" in line for line in local.output.lines)
    assert any(line.startswith("worker-1 | ") and "serving grpc://127.0.0.1:" in line for line in local.output.lines)

    # The export serves: its signature scores the held-out rows like the metrics say.
    served = subprocess.run(
        [sys.executable, "-c", SERVE, metrics["export"], str(dataset)],
        check=False, capture_output=True, text=True, timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"},
    )
    assert served.returncode == 0, served.stderr[-2000:]
    accuracy = float(served.stdout.strip().splitlines()[-1])
    assert abs(accuracy - metrics["accuracy"]) < 1e-6


SERVE = r"""
import csv, glob, sys
import numpy as np, tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
rows = [list(map(float, r)) for r in list(csv.reader(open(glob.glob(sys.argv[2] + "/eval-*.csv")[0])))[1:]]
data = np.asarray(rows, dtype=np.float32)
p = model.signatures["serving_default"](x=tf.constant(data[:, :-1]))["probability"].numpy()
assert p.shape == (len(rows),) and ((p >= 0) & (p <= 1)).all()
print(float(np.mean((p > 0.5) == (data[:, -1] > 0.5))))
"""


def test_tf1_between_graph_asynchronous(local: Local, examples_server: FileServer, dataset: Path) -> None:
    out = run_job(local, tf_job(examples_server.url, "tf1", api="tf1", chief=False))
    assert out.job["status"]["state"]["phase"] == "Completed", local.output.text()[-4000:]
    workers = [replica(local, "tf1", f"tf1-worker-{i}") for i in range(2)]
    assert all(w["exit_code"] == 0 and w["stopped_by"] is None for w in workers)
    ps = replica(local, "tf1", "tf1-ps-0")
    # The workers' TaskCompleted -> CompleteJob ended the parameter server, which outlived them.
    assert ps["stopped_by"] == "CompleteJob" and ps["finished_at"] > max(w["finished_at"] for w in workers)
    assert out.linger is not None and out.linger > 0
    check_outputs(local, "tf1")
    # Each worker read its own shard of the files (--shard_index / --num_shards).
    shards = {i: re.search(rf"worker {i}: shard {i}/2: (\[.*\])", local.output.text()) for i in range(2)}
    assert all(shards.values())
    assert shards[0].group(1) != shards[1].group(1)


def test_mpi_allreduce_over_two_ranks(local: Local, examples_server: FileServer, dataset: Path) -> None:
    steps = 50
    spec = MPIJobSpec(
        job=JobOptions(name="mpi", max_retry=1),
        command=("python3", "train.py", "--steps", str(steps)),
        code=CodeSource(url=examples_server.url + "mpi/"),
        worker=Role(replicas=2),
    )
    out = run_job(local, build_mpi_job(spec))
    assert out.job["status"]["state"]["phase"] == "Completed", local.output.text()[-4000:]
    master_log = Path(replica(local, "mpi", "mpi-mpimaster-0")["log"]).read_text()
    results = dict(re.findall(r"RESULT rank=(\d) size=2 examples=4096 local_examples=\d+ loss=\S+ checksum=(\w+)", master_log))
    # Both ranks took part, and the allreduce left them with exactly the same weights.
    assert sorted(results) == ["0", "1"] and len(set(results.values())) == 1
    result = json.loads((local.log_dir / "mpi-result.json").read_text())
    assert result["ranks"] == 2 and result["examples"] == 4096 and result["checksum"] == results["0"]
    # The same as one process on all the data (full-batch gradient descent; sums in another order).
    example = _mpi_example()
    x, y = example.load(sorted(str(p) for p in dataset.glob("train-*.csv")))
    weights, bias, _, count = example.train(x, y, x.shape[1], steps, result["learning_rate"], lambda v: v)
    assert count == 4096
    assert np.allclose(result["weights"], weights, rtol=0, atol=1e-9) and abs(result["bias"] - bias) < 1e-9
    # The workers' sshd stand-ins ran until the master's TaskCompleted -> CompleteJob.
    assert all(replica(local, "mpi", f"mpi-mpiworker-{i}")["stopped_by"] == "CompleteJob" for i in range(2))
