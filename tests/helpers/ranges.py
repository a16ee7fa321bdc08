"""A local source whose reader serves byte ranges the way the HDFS reader does (length() and
range_stream(offset, length)) and logs each range asked for: the range-copy tests read through it."""

from __future__ import annotations

import os
from collections.abc import Iterator

from volcano_pipelines.transfer.sources import LocalSource

PACKET = 64 << 10


class _RangeReader:
    """What sources.py's HDFS reader offers: length() and range_stream(offset, length)."""

    def __init__(self, path: str, log: list[tuple[int, int]]) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.log = log

    def length(self) -> int:
        return os.fstat(self.fd).st_size

    def range_stream(self, offset: int, length: int) -> Iterator[bytes]:
        self.log.append((offset, length))
        end = offset + length
        while offset < end:
            data = os.pread(self.fd, min(PACKET, end - offset), offset)
            if not data:
                return
            offset += len(data)
            yield data

    def read(self, n: int = -1) -> bytes:
        return os.read(self.fd, n if n >= 0 else self.length())

    def __enter__(self) -> _RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


class _RangeSource(LocalSource):
    snapshot_reads = True

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.ranges: list[tuple[int, int]] = []

    def open(self, rel: str):  # type: ignore[no-untyped-def]
        return _RangeReader(self._abs(rel), self.ranges)
