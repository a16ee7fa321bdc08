"""Data-parallel logistic regression with mpi4py, launched by the job's mpiexec line:

    vpipe train mpi --name lr --workers 2 --code-url http://files/mpi/ -- python3 train.py --steps 100

Every rank reads its share of the CSV shards (examples/data/make_dataset.py), computes the
gradient over its examples, and one Allreduce per step sums the gradients, losses and example
counts, so every rank takes the same step. It is full-batch gradient descent, hence
deterministic: every rank ends with the same weights, equal (up to float rounding) to one
process training on all the data. Each rank prints a RESULT line; rank 0 also writes
<log_dir>/mpi-result.json.

Rank 0 writes a checkpoint (<log_dir>/checkpoints/mpi-<step>.npz) every --checkpoint_every
steps and prints volcano-pipelines' progress lines (`vpipe:progress ...`, docs/progress.md);
a restarted job resumes from the latest checkpoint. On SIGTERM (an eviction, a preemption)
every rank stops at the same step (the stop flag travels in the step's Allreduce), rank 0
writes a checkpoint, and all exit with 143.
"""

from __future__ import annotations

import argparse
import csv
import glob
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

import heartbeat


def load(files: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    rows: list[list[float]] = []
    for path in files:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            next(reader)  # header
            rows.extend([float(v) for v in row] for row in reader if row)
    if not rows:
        return np.zeros((0, 0)), np.zeros(0)
    data = np.asarray(rows, dtype=np.float64)
    return data[:, :-1], data[:, -1]


def partial_sums(w: np.ndarray, b: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[sum of d loss/d w (features), sum of d loss/d b, sum of losses, example count] over
    this rank's examples: one vector, so one Allreduce per step."""
    if len(y) == 0:
        return np.zeros(len(w) + 3)
    z = x @ w + b
    p = 1.0 / (1.0 + np.exp(-z))
    loss = np.logaddexp(0.0, z) - y * z
    return np.concatenate([x.T @ (p - y), [np.sum(p - y), np.sum(loss), float(len(y))]])


Checkpoint = tuple[np.ndarray, float, int]  # weights, bias, steps done
OnStep = Callable[[int, np.ndarray, float, float, int, bool], None]


def train(x: np.ndarray, y: np.ndarray, features: int, steps: int, rate: float,
          allreduce: Callable[[np.ndarray], np.ndarray], *, start: Checkpoint | None = None,
          on_step: OnStep | None = None,
          stopping: Callable[[], bool] = lambda: False) -> tuple[np.ndarray, float, float, int]:
    """Returns (weights, bias, mean loss before the last step, number of examples). Goes on
    from `start` (a checkpoint) when given; calls on_step(step, w, b, loss, count, stop) after
    each step; stops after the step in which any rank's `stopping()` was true (the flag is
    summed in the same Allreduce, so every rank stops at the same step)."""
    w, b, done = start if start is not None else (np.zeros(features), 0.0, 0)
    loss, count = float("nan"), 0
    for step in range(done + 1, steps + 1):
        total = allreduce(np.append(partial_sums(w, b, x, y), 1.0 if stopping() else 0.0))
        stop = total[-1] > 0
        count = int(total[-2])
        loss = total[-3] / count
        w = w - rate * total[:features] / count
        b = b - rate * total[features] / count
        if on_step is not None:
            on_step(step, w, b, float(loss), count, stop)
        if stop:
            break
    if count == 0:  # resumed with nothing left to do: the loss and count where it stands
        total = allreduce(np.append(partial_sums(w, b, x, y), 0.0))
        count, loss = int(total[-2]), total[-3] / max(total[-2], 1.0)
    return w, b, float(loss), count


def latest_checkpoint(directory: str) -> str | None:
    names = [n for n in os.listdir(directory) if n.startswith("mpi-") and n.endswith(".npz")] \
        if os.path.isdir(directory) else []
    return os.path.join(directory, max(names, key=lambda n: int(n[4:-4]))) if names else None


def save_checkpoint(directory: str, w: np.ndarray, b: float, step: int, keep: int = 3) -> str:
    """Written whole or not at all (a temporary file, then a rename); the newest `keep` kept."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"mpi-{step}.npz")
    with open(path + ".tmp", "wb") as f:
        np.savez(f, w=w, b=b, step=step)
    os.replace(path + ".tmp", path)
    old = sorted((n for n in os.listdir(directory) if n.startswith("mpi-") and n.endswith(".npz")),
                 key=lambda n: int(n[4:-4]))[:-keep]
    for name in old:
        os.remove(os.path.join(directory, name))
    return path


def load_checkpoint(path: str) -> Checkpoint:
    with np.load(path) as data:
        return data["w"], float(data["b"]), int(data["step"])


def checksum(w: np.ndarray, b: float) -> str:
    return hashlib.sha256(np.concatenate([w, [b]]).astype("<f8").tobytes()).hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=os.environ.get("VPIPE_DATA_DIR", "/data"))
    parser.add_argument("--log_dir", default=os.environ.get("VPIPE_LOG_DIR", "/logs"))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--learning_rate", type=float, default=0.5)
    parser.add_argument("--checkpoint_every", type=int, default=20)
    parser.add_argument("--log_every", type=int, default=10)
    args = parser.parse_args(argv)
    for flag in ("steps", "checkpoint_every", "log_every"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    stop = {"requested": False, "stopped": False}
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.update(requested=True))

    from mpi4py import MPI  # initializes MPI: imported here so the functions above import without it

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    files = sorted(glob.glob(os.path.join(args.data_dir, "train-*.csv")))
    if not files:
        print(f"rank {rank}: no train-*.csv in {args.data_dir}", file=sys.stderr, flush=True)
        comm.Abort(2)
    with open(os.path.join(args.data_dir, "dataset.json"), encoding="utf-8") as f:
        features = int(json.load(f)["features"])
    mine = files[rank::size]
    x, y = load(mine)
    print(f"rank {rank}/{size}: {len(y)} examples from {[os.path.basename(p) for p in mine]}", flush=True)
    # Every rank beats and reports its steps; rank 0 names the stalled ranks (docs/progress.md).
    beat = heartbeat.Heartbeat(args.log_dir, "rank", rank, scan=rank == 0).start()

    def allreduce(vector: np.ndarray) -> np.ndarray:
        out = np.empty_like(vector)
        comm.Allreduce(vector, out, op=MPI.SUM)
        return out

    checkpoints = os.path.join(args.log_dir, "checkpoints")
    # Rank 0 finds the latest checkpoint and hands it to every rank: all start from one state.
    start = None
    if rank == 0 and (found := latest_checkpoint(checkpoints)) is not None:
        start = load_checkpoint(found)
        print(f"vpipe:resumed step={start[2]} path={found} time={time.time():.3f}", flush=True)
    start = comm.bcast(start, root=0)
    clock = {"last": time.monotonic(), "step": start[2] if start else 0}

    def on_step(step: int, w: np.ndarray, b: float, loss: float, count: int, stopping: bool) -> None:
        stop["stopped"] = stopping  # every rank stops at this step, SIGTERM'd or not
        beat.progress(step, last=step >= args.steps)
        if rank != 0:
            return
        if step % args.log_every == 0 or step == args.steps or stopping:
            now = time.monotonic()
            rate = (step - clock["step"]) * count / max(now - clock["last"], 1e-6)
            print(f"vpipe:progress step={step} total={args.steps} loss={loss:.6f} examples_per_second={rate:.1f} "
                  f"time={time.time():.3f}", flush=True)
            clock.update(last=now, step=step)
        if step % args.checkpoint_every == 0 or step == args.steps or stopping:
            path = save_checkpoint(checkpoints, w, b, step)
            print(f"vpipe:checkpoint step={step} path={path} time={time.time():.3f}", flush=True)

    w, b, loss, count = train(x, y, features, args.steps, args.learning_rate, allreduce, start=start,
                              on_step=on_step, stopping=lambda: stop["requested"])
    if stop["stopped"]:
        print(f"rank {rank}: SIGTERM, stopped with a checkpoint; exiting", flush=True)
        return 128 + signal.SIGTERM
    print(f"RESULT rank={rank} size={size} examples={count} local_examples={len(y)} "
          f"loss={loss:.6f} checksum={checksum(w, b)}", flush=True)
    if rank == 0:
        os.makedirs(args.log_dir, exist_ok=True)
        result = {"ranks": size, "examples": count, "steps": args.steps, "learning_rate": args.learning_rate,
                  "loss": loss, "weights": w.tolist(), "bias": b, "checksum": checksum(w, b)}
        with open(os.path.join(args.log_dir, "mpi-result.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
