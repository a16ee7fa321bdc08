"""The sha256 of a copied file, as --checksum compares it: the source's stream and the
destination's bytes as the file system has them (not our own dirty pages)."""

from __future__ import annotations

import os
from typing import Any, BinaryIO

__all__ = ["hash_file", "hash_stream", "new_digest"]


def hash_stream(stream: BinaryIO, chunk: int) -> tuple[str, int]:
    h = new_digest()
    n = 0
    while True:
        buf = stream.read(chunk)
        if not buf:
            return h.hexdigest(), n
        h.update(buf)
        n += len(buf)


def new_digest() -> Any:
    import hashlib  # only with --checksum: OpenSSL's import is a few ms of every start

    return hashlib.sha256()


def hash_file(path: str, chunk: int) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        # Read what the file system has, not our own dirty pages.
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        with os.fdopen(fd, "rb", buffering=0) as f:
            fd = -1
            return hash_stream(f, chunk)[0]
    finally:
        if fd >= 0:
            os.close(fd)
