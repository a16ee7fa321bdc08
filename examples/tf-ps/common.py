"""What both TensorFlow variants share: the arguments of the entry-point contract, the data
files, a numpy evaluation, the SavedModel export layout and the metrics file."""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import heartbeat

FEATURES_KEY = "x"
LABEL_KEY = "y"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def report(kind: str, **fields: Any) -> None:
    """One line of volcano-pipelines' progress protocol (docs/progress.md), e.g.
    `vpipe:progress step=1200 total=6000 loss=0.431 examples_per_second=812.5`: the train step
    reads it from this pod's log and shows progress, the ETA and the last checkpoint."""
    # When it happened: the step's rate and ETA come from the printed times, not from when the
    # step read the line (it reads a tail of many lines at once).
    fields.setdefault("time", f"{time.time():.3f}")
    pairs = [f'{key}="{value}"' if " " in str(value) else f"{key}={value}"
             for key, value in fields.items() if value is not None]
    print(" ".join([f"vpipe:{kind}", *pairs]), flush=True)
    # Only steps made count (a resumed run that has not stepped yet is still starting up).
    if _heartbeat is not None and kind == "progress" and isinstance(fields.get("step"), int):
        total = fields.get("total")
        _heartbeat.progress(fields["step"], last=isinstance(total, int) and fields["step"] >= total)


# This process's heartbeat file (heartbeat.py, docs/progress.md "Hung tasks"), once started.
_heartbeat: heartbeat.Heartbeat | None = None


def start_heartbeat(args: argparse.Namespace) -> None:
    """Every task beats (the parameter servers and TF2's workers too, as liveness: they make
    no steps of their own); the coordinator (TF2's chief, else worker 0) also watches the
    others' beats and names the stalled ones in its log."""
    global _heartbeat
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}
    except ValueError:
        cluster = {}
    coordinator = args.job_name == "chief" or (args.job_name == "worker" and args.task_index == 0
                                               and "chief" not in cluster)
    _heartbeat = heartbeat.Heartbeat(args.log_dir, args.job_name, args.task_index, scan=coordinator).start()


# What a process stopped by SIGTERM exits with (128 + 15): not 0, so a coordinator that stops
# early is never taken for one that finished (its TaskCompleted would complete the job).
EXIT_SIGTERM = 128 + signal.SIGTERM


class StopRequest:
    """SIGTERM (an eviction, a preemption, a deleted pod, a node drain) asks the training
    loop to stop: it writes a checkpoint and exits within the pod's grace period. A handler is
    needed: a container's first process ignores SIGTERM unless it installs one."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, _signum: int, _frame: Any) -> None:
        self.requested = True


def serve_until_stopped(role: str, index: int) -> int:
    """For parameter servers and TF2 workers: the server runs in its own threads; this waits
    in Python, so SIGTERM ends the process at once (they hold nothing to save)."""
    def stop(_signum: int, _frame: Any) -> None:
        log(f"{role} {index}: SIGTERM, exiting")
        os._exit(EXIT_SIGTERM)  # TensorFlow's server threads would hold up a normal exit

    signal.signal(signal.SIGTERM, stop)
    while True:  # never returns: the job's CompleteJob policy ends this task
        time.sleep(3600)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tiny logistic regression with parameter servers (TF2 or TF1).")
    # The entry-point contract (every task gets all of these).
    parser.add_argument("--job_name", required=True, help="ps, worker, chief or evaluator")
    parser.add_argument("--task_index", type=int, required=True)
    parser.add_argument("--ps_hosts", default="")
    parser.add_argument("--worker_hosts", default="")
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--log_dir", required=True)
    parser.add_argument("--shard_index", type=int, default=0)
    parser.add_argument("--num_shards", type=int, default=1)
    # This example's own arguments (the job's `-- ARGS`).
    parser.add_argument("--api", choices=("tf2", "tf1"), default="tf2",
                        help="tf2: ParameterServerStrategy with a ClusterCoordinator on the chief; "
                             "tf1: between-graph asynchronous training with tf.compat.v1")
    parser.add_argument("--steps", type=int, default=300, help="global training steps")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=0.2)
    parser.add_argument("--checkpoint_every", type=int, default=100)
    parser.add_argument("--log_every", type=int, default=50)
    parser.add_argument("--model_name", default="tiny")
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow intra/inter-op threads (0: TensorFlow decides)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max_steps_per_second", type=float, default=0.0,
                        help="tf2: pause between blocks of steps so that training runs no faster than this "
                             "(0: as fast as it can); for demos and tests that watch progress for a while")
    args = parser.parse_args(argv)
    if not args.max_steps_per_second >= 0:
        parser.error(f"--max_steps_per_second must be 0 or more, got {args.max_steps_per_second}")
    for flag in ("steps", "batch_size", "checkpoint_every", "log_every"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    if args.num_shards < 1 or not 0 <= args.shard_index < args.num_shards:
        parser.error(f"--shard_index={args.shard_index} must be in [0, --num_shards={args.num_shards})")
    return args


def hosts(value: str) -> list[str]:
    """A --ps_hosts / --worker_hosts value: a comma list, or `@FILE` naming one (volcano-pipelines
    passes the file when the list is longer than one argument may be: thousands of hosts)."""
    if value.startswith("@"):
        with open(value[1:], encoding="utf-8") as f:
            value = f.read()
    return [h for h in value.strip().split(",") if h]


def whole_cluster_resolver(tf: Any) -> Any:
    """The whole cluster for the TF2 coordinator: from volcano-pipelines' cluster file when the
    job runs under it (TF_CONFIG holds only what each role needs, and at thousands of tasks not
    every address), else from TF_CONFIG."""
    try:
        import vpipe_cluster  # written by the entry point, on PYTHONPATH
    except ImportError:
        return tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return vpipe_cluster.cluster_resolver()


def train_files(data_dir: str) -> list[str]:
    files = sorted(glob.glob(os.path.join(data_dir, "train-*.tfrecord")))
    if not files:
        raise SystemExit(f"no train-*.tfrecord files in --data_dir={data_dir} (examples/data/make_dataset.py writes them)")
    return files


def shard_files(files: list[str], shard_index: int, num_shards: int) -> list[str]:
    """Whole files per worker when there are enough of them; else every worker reads all."""
    if len(files) >= num_shards:
        return files[shard_index::num_shards]
    return files


def feature_count(data_dir: str) -> int:
    with open(os.path.join(data_dir, "dataset.json"), encoding="utf-8") as f:
        return int(json.load(f)["features"])


def tfrecords(path: str) -> Iterator[bytes]:
    """The records of a TFRecord file (framing: length, its CRC, data, its CRC; the CRCs are
    not checked here: TensorFlow checks them when it trains on the same files)."""
    with open(path, "rb") as f:
        while True:
            head = f.read(12)
            if not head:
                return
            if len(head) < 12:
                raise ValueError(f"{path}: truncated record header")
            (length,) = struct.unpack("<Q", head[:8])
            data = f.read(length)
            if len(data) < length or len(f.read(4)) < 4:
                raise ValueError(f"{path}: truncated record")
            yield data


def load_eval(data_dir: str) -> tuple[Any, Any]:
    """The held-out split as numpy arrays, read without a session or eager context so both
    variants can use it (TF1 mode turns eager execution off)."""
    import numpy as np
    import tensorflow as tf

    xs, ys = [], []
    for path in sorted(glob.glob(os.path.join(data_dir, "eval-*.tfrecord"))):
        for raw in tfrecords(path):
            ex = tf.train.Example.FromString(raw)
            xs.append(list(ex.features.feature[FEATURES_KEY].float_list.value))
            ys.append(ex.features.feature[LABEL_KEY].int64_list.value[0])
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def evaluate(weights: Any, bias: float, xs: Any, ys: Any) -> dict[str, float]:
    import numpy as np

    logits = xs @ np.asarray(weights, dtype=np.float64).reshape(-1) + float(bias)
    # log(1 + e^z) - y z, written to stay finite for large |z|
    loss = np.mean(np.logaddexp(0.0, logits) - ys * logits)
    accuracy = np.mean((logits > 0).astype(np.float64) == ys)
    return {"loss": float(loss), "accuracy": float(accuracy)}


def initial_loss() -> float:
    """Every example's loss with all-zero weights: log 2."""
    return math.log(2.0)


def export_dir(log_dir: str, model_name: str, version: int) -> str:
    """TF Serving's layout: <base>/<model>/<integer version>/."""
    return os.path.join(log_dir, "export", model_name, str(version))


def publish_export(tmp_dir: str, final_dir: str) -> None:
    """Move a finished SavedModel into place so a model server never sees half of one."""
    os.makedirs(os.path.dirname(final_dir), exist_ok=True)
    if os.path.exists(final_dir):  # a restarted job exporting the same step again
        old = final_dir + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(final_dir, old)
        os.rename(tmp_dir, final_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp_dir, final_dir)


def write_metrics(log_dir: str, metrics: dict[str, Any]) -> None:
    path = os.path.join(log_dir, "metrics.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)
    log("metrics: " + json.dumps(metrics, sort_keys=True))


def wait_for_hosts(addresses: list[str], timeout: float = 300.0) -> None:
    """Gang scheduling starts every task together, but a server may not listen yet."""
    deadline = time.monotonic() + timeout
    for address in addresses:
        host, _, port = address.rpartition(":")
        while True:
            try:
                with socket.create_connection((host, int(port)), timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{address} did not accept connections within {timeout:.0f} s") from None
                time.sleep(0.2)


def set_threads(tf: Any, threads: int) -> None:
    if threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
