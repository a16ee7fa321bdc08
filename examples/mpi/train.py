"""Data-parallel logistic regression with mpi4py, launched by the job's mpiexec line:

    vpipe train mpi --name lr --workers 2 --code-url http://files/mpi/ -- python3 train.py --steps 100

Every rank reads its share of the CSV shards (examples/data/make_dataset.py), computes the
gradient over its examples, and one Allreduce per step sums the gradients, losses and example
counts, so every rank takes the same step. It is full-batch gradient descent, hence
deterministic: every rank ends with the same weights, equal (up to float rounding) to one
process training on all the data. Each rank prints a RESULT line; rank 0 also writes
<log_dir>/mpi-result.json.
"""

from __future__ import annotations

import argparse
import csv
import glob
import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence

import numpy as np


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


def train(x: np.ndarray, y: np.ndarray, features: int, steps: int, rate: float,
          allreduce: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, float, float, int]:
    """Returns (weights, bias, mean loss before the last step, number of examples)."""
    w, b = np.zeros(features), 0.0
    loss, count = float("nan"), 0
    for _ in range(steps):
        total = allreduce(partial_sums(w, b, x, y))
        count = int(total[-1])
        loss = total[-2] / count
        w = w - rate * total[:features] / count
        b = b - rate * total[features] / count
    return w, b, float(loss), count


def checksum(w: np.ndarray, b: float) -> str:
    return hashlib.sha256(np.concatenate([w, [b]]).astype("<f8").tobytes()).hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=os.environ.get("VPIPE_DATA_DIR", "/data"))
    parser.add_argument("--log_dir", default=os.environ.get("VPIPE_LOG_DIR", "/logs"))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--learning_rate", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")

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

    def allreduce(vector: np.ndarray) -> np.ndarray:
        out = np.empty_like(vector)
        comm.Allreduce(vector, out, op=MPI.SUM)
        return out

    w, b, loss, count = train(x, y, features, args.steps, args.learning_rate, allreduce)
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
