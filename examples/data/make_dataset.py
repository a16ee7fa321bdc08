#!/usr/bin/env python3
"""A small synthetic binary classification set, generated on the fly (no download).

    python3 make_dataset.py OUT_DIR [--examples 4096] [--features 8] [--shards 4] [--seed 7]

writes, for N shards:

    OUT_DIR/train-0000i-of-0000N.tfrecord   tf.train.Example {x: float[features], y: int64}
    OUT_DIR/train-0000i-of-0000N.csv        x0,...,x{features-1},y
    OUT_DIR/eval-00000-of-00001.{tfrecord,csv}
    OUT_DIR/dataset.json                    what was written (counts, the true weights)

Standard library only, so the data can be made where TensorFlow is not installed (the MPI
example reads the CSV files). The TFRecord framing and the Example protobuf are written by
hand: both formats are small and stable, and TensorFlow reading these files back is itself
a check that they are right. The same seed always gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
from collections.abc import Sequence

# --- TFRecord framing: length, masked CRC-32C of the length, data, masked CRC-32C of the data.

_CRC32C_TABLE: list[int] = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ 0x82F63B78 if _crc & 1 else _crc >> 1
    _CRC32C_TABLE.append(_crc)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(payload: bytes) -> bytes:
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", _masked_crc(length)) + payload + struct.pack("<I", _masked_crc(payload))


# --- tf.train.Example as protobuf wire format (field numbers from tensorflow/core/example).


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def example(floats: dict[str, Sequence[float]], ints: dict[str, Sequence[int]]) -> bytes:
    entries = b""
    for key, values in floats.items():
        float_list = _field(1, struct.pack(f"<{len(values)}f", *values))  # FloatList.value, packed
        entries += _field(1, _field(1, key.encode()) + _field(2, _field(2, float_list)))  # Feature.float_list = 2
    for key, values in ints.items():
        int64_list = _field(1, b"".join(_varint(v) for v in values))  # Int64List.value, packed (v >= 0)
        entries += _field(1, _field(1, key.encode()) + _field(2, _field(3, int64_list)))  # Feature.int64_list = 3
    return _field(1, entries)  # Example.features = 1 { Features.feature = 1 (map entries) }


# --- The data: y = 1 when w.x + b + noise > 0.


def make_examples(n: int, features: int, rng: random.Random, weights: list[float], bias: float) -> list[tuple[list[float], int]]:
    rows = []
    for _ in range(n):
        # float32-representable values, so CSV and TFRecord hold exactly the same numbers.
        x = [struct.unpack("<f", struct.pack("<f", rng.gauss(0.0, 1.0)))[0] for _ in range(features)]
        score = sum(w * v for w, v in zip(weights, x, strict=True)) + bias + rng.gauss(0.0, 0.3)
        rows.append((x, 1 if score > 0 else 0))
    return rows


def write_split(out_dir: str, name: str, rows: list[tuple[list[float], int]], shards: int, features: int) -> list[str]:
    written = []
    for shard in range(shards):
        part = rows[shard::shards]
        stem = os.path.join(out_dir, f"{name}-{shard:05d}-of-{shards:05d}")
        with open(stem + ".tfrecord.tmp", "wb") as f:
            f.writelines(tfrecord(example({"x": x}, {"y": [y]})) for x, y in part)
        with open(stem + ".csv.tmp", "w", encoding="utf-8") as f:
            f.write(",".join([f"x{i}" for i in range(features)] + ["y"]) + "\n")
            f.writelines(",".join([repr(v) for v in x] + [str(y)]) + "\n" for x, y in part)
        # Readers never see a half-written shard.
        os.replace(stem + ".tfrecord.tmp", stem + ".tfrecord")
        os.replace(stem + ".csv.tmp", stem + ".csv")
        written += [stem + ".tfrecord", stem + ".csv"]
    return written


def make_dataset(out_dir: str, *, examples: int = 4096, eval_examples: int = 512, features: int = 8,
                 shards: int = 4, seed: int = 7) -> dict[str, object]:
    rng = random.Random(seed)
    weights = [round(rng.uniform(-2.0, 2.0), 3) for _ in range(features)]
    bias = round(rng.uniform(-0.5, 0.5), 3)
    os.makedirs(out_dir, exist_ok=True)
    train = make_examples(examples, features, rng, weights, bias)
    held_out = make_examples(eval_examples, features, rng, weights, bias)
    files = write_split(out_dir, "train", train, shards, features)
    files += write_split(out_dir, "eval", held_out, 1, features)
    info: dict[str, object] = {
        "features": features,
        "train_examples": examples,
        "eval_examples": eval_examples,
        "shards": shards,
        "seed": seed,
        "true_weights": weights,
        "true_bias": bias,
        "positive_fraction": sum(y for _, y in train) / max(1, len(train)),
        "files": sorted(os.path.basename(f) for f in files),
    }
    with open(os.path.join(out_dir, "dataset.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--eval-examples", type=int, default=512)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    for flag, value in (("--examples", args.examples), ("--eval-examples", args.eval_examples),
                        ("--features", args.features), ("--shards", args.shards)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    info = make_dataset(args.out_dir, examples=args.examples, eval_examples=args.eval_examples,
                        features=args.features, shards=args.shards, seed=args.seed)
    print(f"wrote {info['train_examples']} training examples in {args.shards} shards and "
          f"{info['eval_examples']} eval examples to {args.out_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
