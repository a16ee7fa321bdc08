"""Helpers for sync tests: write a tree into HDFS, read a destination tree back."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from volcano_pipelines.transfer.plan import RESERVED_DIR, is_temp_name


# A directory mtime far in the past: listings read now are not racy (see transfer/dest.py).
OLD_NS = 1_600_000_000 * 10**9


def age_dirs(root: Path) -> None:
    """Every directory's mtime set to OLD_NS, as if the last change was long ago (as after
    a real earlier run): listings read right after a change are not cached."""
    for directory, _, _ in os.walk(root):
        os.utime(directory, ns=(OLD_NS, OLD_NS))


def put_tree(client: Any, root: str, files: dict[str, bytes]) -> None:
    """Write files into HDFS; in parallel, since each close waits on the NameNode."""
    from hdfs_native import WriteOptions

    for directory in sorted({f"{root}/{rel}".rsplit("/", 1)[0] for rel in files}):
        client.mkdirs(directory, create_parent=True)

    def put(item: tuple[str, bytes]) -> None:
        with client.create(f"{root}/{item[0]}", WriteOptions(overwrite=True)) as w:
            w.write(item[1])

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(put, files.items()))


def hdfs_mtimes(client: Any, root: str) -> dict[str, int]:
    prefix = root.rstrip("/") + "/"
    return {
        st.path[len(prefix):]: st.modification_time
        for st in client.list_status(root, recursive=True)
        if not st.isdir
    }


def read_tree(root: Path) -> dict[str, bytes]:
    """Regular files under root (not .vpipe/), as {relative path: content}."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            rel_dir = ""
            if RESERVED_DIR in dirnames:
                dirnames.remove(RESERVED_DIR)
        for name in filenames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            out[rel] = (Path(dirpath) / name).read_bytes()
    return out


def temp_files(root: Path) -> list[str]:
    return [
        os.path.join(d, n) for d, _, names in os.walk(root) for n in names if is_temp_name(n)
    ]
