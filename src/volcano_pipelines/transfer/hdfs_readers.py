"""hdfs:// file readers over hdfs-native (transfer/sources.py's HdfsSource opens them; how
transfer/copy.py moves their bytes is in its docstring, the whole story in docs/sync.md)."""

from __future__ import annotations

from typing import Any, cast
from collections.abc import Iterator

from volcano_pipelines.transfer.copy import DestinationError

__all__ = ["HDFS_PACKETS", "HDFS_READINTO", "HdfsBufferReader", "HdfsReader", "hdfs_read_path"]


# hdfs:// read paths (SyncResult.read_path): the stock binding hands each 64 KiB packet over as
# a new `bytes`, written with pwritev many at a time; the patched one (images/hdfs-native/, in
# the runtime image) writes a range's packets into the destination itself (`write_to`), or fills
# the copier's reused buffers (`readinto`), with the GIL released.
HDFS_PACKETS = "hdfs-packets"
HDFS_READINTO = "hdfs-readinto"


def hdfs_read_path() -> str:
    """HDFS_READINTO where the installed hdfs-native can read into a caller's buffer (its
    FileReader defines `readinto`: io.RawIOBase's own only raises), else HDFS_PACKETS."""
    import hdfs_native

    return HDFS_READINTO if "readinto" in vars(hdfs_native.FileReader) else HDFS_PACKETS


class HdfsReader:
    """hdfs_native.FileReader; large files go through `range_stream` (transfer/copy.py)."""

    def __init__(self, reader: Any) -> None:
        self._r = reader

    def read(self, n: int = -1) -> bytes:
        return cast(bytes, self._r.read(n))

    def length(self) -> int:
        return len(self._r)

    def range_stream(self, offset: int, length: int) -> Iterator[bytes]:
        return self._r.read_range_stream(offset, length)  # type: ignore[no-any-return]

    def close(self) -> None:
        self._r.close()

    def __enter__(self) -> HdfsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HdfsBufferReader(HdfsReader):
    """The patched binding: a small file read into the copier's buffer (`readinto`), a large one
    as ranges whose streams fill a reused buffer each (`range_reader`, transfer/copy.py)."""

    def readinto(self, buf: Any) -> int:
        return cast(int, self._r.readinto(buf))

    def range_reader(self, offset: int, length: int) -> Any:
        stream = self._r.read_range_stream(offset, length)
        return _HdfsRange(stream) if hasattr(stream, "write_to") else stream


class _HdfsRange:
    """A range stream of the patched binding from 0.14.7+vpipe.2 on: `write_to` pwrites its
    packets into the destination from hdfs-native's own buffers (no copy in user space)."""

    def __init__(self, stream: Any) -> None:
        from hdfs_native import WriteError  # type: ignore[attr-defined,unused-ignore]

        self._s, self._error, self.readinto = stream, WriteError, stream.readinto

    def write_to(self, fd: int, offset: int, limit: int) -> int:
        try:
            return cast(int, self._s.write_to(fd, offset, limit))
        except self._error as err:  # the destination's error, not HDFS's
            raise DestinationError(err) from err
