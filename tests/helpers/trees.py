"""File trees for tests: `write_tree(root, {"a/b.txt": b"..."})` makes the files (and their
directories) under root."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_tree"]


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
