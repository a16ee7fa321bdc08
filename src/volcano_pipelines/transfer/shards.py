"""Shard manifests written into the destination: N lists of files balanced by bytes, one per
worker (`--shards`), under <root>/.vpipe/shards/."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from volcano_pipelines.transfer.dest import remove_temp_files, write_file_atomic
from volcano_pipelines.transfer.plan import (
    RESERVED_DIR,
    Entry,
    shard_by_bytes,
    shard_file_name,
)

__all__ = ["SHARDS_DIR", "write_shards"]

SHARDS_DIR = f"{RESERVED_DIR}/shards"


def write_shards(root: str, entries: Sequence[Entry], count: int) -> list[str]:
    """N manifest files (one relative path per line, balanced by bytes) plus index.json
    under <root>/.vpipe/shards/; worker i reads shard-i-of-N. Returns their paths."""
    directory = os.path.join(root, SHARDS_DIR)
    os.makedirs(directory, exist_ok=True)
    shards = shard_by_bytes(entries, count)
    written: list[str] = []
    index: dict[str, Any] = {"num_shards": count, "shards": []}
    for shard in shards:
        name = shard_file_name(shard.index, count)
        path = os.path.join(directory, name)
        write_file_atomic(path, "".join(p + "\n" for p in shard.paths).encode("utf-8", "surrogateescape"))
        written.append(path)
        index["shards"].append({"index": shard.index, "file": name, "files": len(shard.paths), "bytes": shard.bytes})
    write_file_atomic(os.path.join(directory, "index.json"), json.dumps(index, indent=1).encode())
    keep = {os.path.basename(p) for p in written} | {"index.json"}
    for name in os.listdir(directory):
        if name not in keep and name.startswith("shard-"):
            os.unlink(os.path.join(directory, name))
    remove_temp_files(directory)
    return written
