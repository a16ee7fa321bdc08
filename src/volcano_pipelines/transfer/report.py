"""Progress hooks and the shard manifests written into the destination."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence

from volcano_pipelines.transfer.dest import remove_temp_files, write_file_atomic
from volcano_pipelines.transfer.plan import (
    RESERVED_DIR,
    Entry,
    shard_by_bytes,
    shard_file_name,
)

SHARDS_DIR = f"{RESERVED_DIR}/shards"


class Progress:
    """Receives progress from the transfer threads. The default does nothing; front ends
    subclass it (a bar on a terminal, periodic log lines otherwise). Thread-safe totals."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.files_total = 0
        self.bytes_total = 0
        self.files_done = 0
        self.bytes_done = 0

    def planned(self, summary: str) -> None:
        """One line on what the run is about to do (after listing and planning)."""

    def start(self, files: int, nbytes: int) -> None:
        self.files_total, self.bytes_total = files, nbytes
        self.changed()

    def advance(self, path: str, nbytes: int) -> None:
        with self.lock:
            self.bytes_done += nbytes
        self.changed()

    def file_done(self, path: str, result: str) -> None:
        with self.lock:
            self.files_done += 1
        self.changed()

    def changed(self) -> None:
        pass

    def stopping(self, message: str) -> None:
        """One line when Ctrl-C stops the run (called from the SIGINT handler: must not
        wait for a lock a transfer thread may hold)."""

    def finish(self) -> None:
        pass


def write_shards(root: str, entries: Sequence[Entry], count: int) -> list[str]:
    """N manifest files (one relative path per line, balanced by bytes) plus index.json
    under <root>/.vpipe/shards/; worker i reads shard-i-of-N. Returns their paths."""
    directory = os.path.join(root, SHARDS_DIR)
    os.makedirs(directory, exist_ok=True)
    shards = shard_by_bytes(entries, count)
    written: list[str] = []
    index = {"num_shards": count, "shards": []}
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
