"""Moving one file's bytes from a source stream into a destination descriptor, with as
few copies and calls as Python allows:

- a source that opens ranges as readers with `write_to` (HDFS through the patched
  hdfs-native of images/hdfs-native/, 0.14.7+vpipe.2 on) has them write themselves: each
  call pwritev's up to 1 MiB of packets into the file from the buffers hdfs-native received
  and checked them in (the GIL released): no copy in user space, no Python object per packet;
- a source that opens ranges as readers with `readinto` (WebHDFS: the DataNode's HTTP
  body, transfer/webhdfs.py; the patched hdfs-native with a digest to feed) is read into one
  reused 1 MiB buffer per thread and written from it with `pwrite`: no Python object per
  packet, no copy in user space beyond the one into that buffer;
- a source that streams ranges (HDFS through the stock hdfs-native: `read_range_stream`,
  one new `bytes` per 64 KiB packet) is written with `pwritev`, many packets per call: no
  buffer is joined, and the 8 MiB `read()` of hdfs-native (which assembles the packets into
  one buffer and copies it twice more on its way to Python) is not used;
- a large file is read as several ranges in parallel (like rclone's multi-thread
  streams), each written at its own offset;
- a source with `readinto` (a local file, a small HDFS file through the patched binding) is
  read into one reused buffer;
- anything else (fsspec) is read in `chunk_size` pieces.

Write errors are raised as `DestinationError` (carrying the system's OSError) so the
executor can tell them from source errors."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from volcano_pipelines.transfer.durability import FlushBehind

__all__ = ["Abandoned", "DestinationError", "SourceChanged", "copy_stream", "keep_freed_memory", "plan_ranges"]

# A range read in parallel is at least this long: below it the extra stream's set-up (a
# DataNode connection, a thread) costs more than it overlaps.
MIN_RANGE = 32 << 20
# The buffer a range reader fills per call: large enough that the per-call cost is small
# (a thousand calls per GiB), small enough to stay in the CPU cache between the two
# kernel copies (socket -> buffer, buffer -> page cache).
RANGE_BUFFER = 1 << 20


class SourceChanged(Exception):
    pass


class Abandoned(Exception):
    """A second Ctrl-C: the copy in flight stops between writes (its temporary file goes)."""


class DestinationError(OSError):
    """A write to the destination failed (open, write, flush, rename), not a read from the
    source: the executor decides by its errno (full, denied, retry on EIO) instead of the
    source's transient-error rules. `error` is the OSError the system raised; errno, the
    file names and the message are its own, so what the user reads does not change."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.errno, error.strerror)
        self.error = error
        self.filename, self.filename2 = error.filename, error.filename2

    def __str__(self) -> str:
        return str(self.error)


OnBytes = Callable[[int], None]


def keep_freed_memory() -> None:
    """Large copies allocate and free a 64 KiB buffer per packet (hdfs-native, then
    Python) from many threads; glibc hands freed memory at the top of each thread's arena
    back to the kernel, and the next packet faults fresh zeroed pages in again (about a
    tenth of the process's CPU in a perf profile of 8 x 128 MiB). Keep up to 256 MiB
    instead. glibc only; elsewhere nothing happens."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_top_pad = -1, -2
    mallopt(m_trim_threshold, 256 << 20)
    mallopt(m_top_pad, 64 << 20)


def plan_ranges(size: int, streams: int, min_range: int | None = None) -> list[tuple[int, int]]:
    """(offset, length) of the ranges a file of `size` bytes is read in: one, or up to
    `streams` of at least `min_range` bytes (default MIN_RANGE), covering the file exactly."""
    if size <= 0:
        return [(0, 0)]
    count = max(1, min(streams, size // (min_range or MIN_RANGE)))
    step = -(-size // count)
    return [(off, min(step, size - off)) for off in range(0, size, step)]


def _pwrite_all(fd: int, bufs: list[Any], offset: int) -> None:
    """pwritev until every byte of `bufs` is at `offset` onwards (a write may be short)."""
    total = sum(len(b) for b in bufs)
    try:
        done = os.pwritev(fd, bufs, offset)
        if done == total:
            return
        # Short write: finish the rest buffer by buffer (rare; FUSE writes whole).
        view = memoryview(b"".join(bufs))[done:]
        pos = offset + done
        while view:
            n = os.pwrite(fd, view, pos)
            view, pos = view[n:], pos + n
    except OSError as err:
        raise DestinationError(err) from err


def _write_ranges(
    fd: int,
    packets: Iterable[bytes],
    offset: int,
    length: int,
    group: int,
    on_bytes: OnBytes,
    abandon: threading.Event,
    halt: threading.Event,
    digest: Any | None,
) -> int:
    """Write one range's packets at `offset`, `group` bytes per pwritev. Returns bytes.
    `halt`: another range of the same file failed, stop."""
    bufs: list[bytes] = []
    pending = 0
    pos = offset
    written = 0
    for packet in packets:
        if digest is not None:
            digest.update(packet)
        bufs.append(packet)
        pending += len(packet)
        if pending >= group:
            _pwrite_all(fd, bufs, pos)
            pos += pending
            written += pending
            on_bytes(pending)
            bufs, pending = [], 0
            _check_range(abandon, halt, written, length)
    if bufs:
        _pwrite_all(fd, bufs, pos)
        written += pending
        on_bytes(pending)
    return written


def copy_stream(
    stream: Any,
    fd: int,
    size: int,
    *,
    chunk_size: int,
    streams: int,
    pool: ThreadPoolExecutor | None,
    on_bytes: OnBytes,
    abandon: threading.Event,
    digest: Any | None = None,
    flush_every: int = 0,
    flush_turn: threading.Lock | None = None,
) -> tuple[int, int]:
    """Copy the listed `size` bytes of `stream` into `fd` (a new, empty file). Returns
    (bytes written, reads): more than one read means the file was not read in one piece.
    `flush_every` > 0: durability.FlushBehind, one early flush at a time among the copies
    sharing `flush_turn`. Raises SourceChanged when the source does not hold `size` bytes,
    Abandoned on a second Ctrl-C, DestinationError for a write error (an early flush's
    included), OSError for a read error."""
    if not flush_every or size <= flush_every:
        return _copy(stream, fd, size, chunk_size, streams, pool, on_bytes, abandon, digest)
    behind = FlushBehind(fd, flush_every, size, flush_turn)

    def flushing(n: int, report: OnBytes = on_bytes) -> None:
        report(n)
        try:
            behind.wrote(n)
        except OSError as err:
            raise DestinationError(err) from err

    try:
        result = _copy(stream, fd, size, chunk_size, streams, pool, flushing, abandon, digest)
    except BaseException:
        behind.finish(raise_error=False)
        raise
    try:
        behind.finish()
    except OSError as err:
        raise DestinationError(err) from err
    return result


def _copy(
    stream: Any,
    fd: int,
    size: int,
    chunk_size: int,
    streams: int,
    pool: ThreadPoolExecutor | None,
    on_bytes: OnBytes,
    abandon: threading.Event,
    digest: Any | None,
) -> tuple[int, int]:
    """copy_stream's paths, by what the source offers."""
    range_reader = getattr(stream, "range_reader", None)
    if range_reader is not None and size > chunk_size:
        _check_length(stream, size)
        ranges = plan_ranges(size, 1 if digest is not None or pool is None else streams)

        def one(off: int, length: int, halt: threading.Event, digest: Any | None) -> int:
            return _read_range_into(fd, range_reader(off, length), off, length, on_bytes, abandon, halt, digest)

        return _run_ranges(one, ranges, pool, digest, size)
    range_stream = getattr(stream, "range_stream", None)
    if range_stream is not None and size > chunk_size:
        _check_length(stream, size)
        # The digest needs the bytes in order: one stream then.
        ranges = plan_ranges(size, 1 if digest is not None or pool is None else streams)

        def one_stream(off: int, length: int, halt: threading.Event, digest: Any | None) -> int:
            return _write_ranges(fd, range_stream(off, length), off, length, chunk_size, on_bytes, abandon, halt,
                                 digest)

        return _run_ranges(one_stream, ranges, pool, digest, size)
    return _copy_sequential(stream, fd, size, chunk_size, on_bytes, abandon, digest)


def _check_length(stream: Any, size: int) -> None:
    """A source that knows its length as opened (HDFS: its blocks were located) must hold
    the listed size: ranges past its end cannot be read (hdfs-native panics)."""
    length = getattr(stream, "length", None)
    if length is not None and (have := length()) != size:
        raise SourceChanged(f"source holds {have} bytes, listed size {size}")


def _run_ranges(
    one: Callable[[int, int, threading.Event, Any | None], int],
    ranges: list[tuple[int, int]],
    pool: ThreadPoolExecutor | None,
    digest: Any | None,
    size: int,
) -> tuple[int, int]:
    """`one(offset, length, halt, digest)` for every range: the first in this thread (with
    the digest, which needs the bytes in order: then there is one range), the others in
    `pool`. Returns (bytes, reads); every range has stopped when it returns or raises."""
    jobs: list[Future[int]] = []
    halt = threading.Event()
    try:
        for off, length in ranges[1:]:
            assert pool is not None
            jobs.append(pool.submit(one, off, length, halt, None))
        off, length = ranges[0]
        written = one(off, length, halt, digest)
    except BaseException:
        halt.set()
        raise
    finally:
        results = [_outcome(job) for job in jobs]
    for result in results:
        if isinstance(result, BaseException):
            raise result
        written += result
    if written != size:
        raise SourceChanged(f"read {written} bytes, listed size {size}")
    return written, len(ranges) + 1


_range_buffers = threading.local()


def _range_buffer() -> memoryview:
    buf = getattr(_range_buffers, "buf", None)
    if buf is None:
        buf = _range_buffers.buf = memoryview(bytearray(RANGE_BUFFER))
    return buf


def _read_range_into(
    fd: int,
    reader: Any,
    offset: int,
    length: int,
    on_bytes: OnBytes,
    abandon: threading.Event,
    halt: threading.Event,
    digest: Any | None,
) -> int:
    """Read one range from `reader` into `fd` at its offset: with `write_to` (the patched
    hdfs-native: its packets pwritten from its own buffers, no copy; DestinationError for a
    write) unless the digest needs the bytes, else `readinto` this thread's buffer and pwrite
    it. Returns the bytes written; more than `length` is a changed source."""
    write_to = getattr(reader, "write_to", None) if digest is None else None
    buf = _range_buffer()
    pos = offset
    written = 0
    while True:
        n = write_to(fd, pos, RANGE_BUFFER) if write_to is not None else reader.readinto(buf)
        if not n:
            return written
        if write_to is not None:
            pos += n
        else:
            view = buf[:n]
            if digest is not None:
                digest.update(view)
            try:
                while view:
                    k = os.pwrite(fd, view, pos)
                    view, pos = view[k:], pos + k
            except OSError as err:
                raise DestinationError(err) from err
        written += n
        on_bytes(n)
        _check_range(abandon, halt, written, length)


def _check_range(abandon: threading.Event, halt: threading.Event, written: int, length: int) -> None:
    """Between writes of one range: a second Ctrl-C, another range's failure, or a source
    that gives more than the range asked for stops it."""
    if abandon.is_set():
        raise Abandoned()
    if halt.is_set():
        raise SourceChanged("stopped: another range of the file failed")
    if written > length:
        raise SourceChanged(f"more than the {length} bytes asked for")


def _outcome(job: Future[int]) -> int | BaseException:
    try:
        return job.result()
    except BaseException as err:  # noqa: BLE001 - re-raised by the caller, first one wins
        return err


_buffers = threading.local()


def _buffer(size: int) -> memoryview:
    """This thread's read buffer, reused for every file it copies (grown when needed:
    bytearray(n) writes n zero bytes)."""
    buf = getattr(_buffers, "buf", None)
    if buf is None or len(buf) < size:
        buf = _buffers.buf = memoryview(bytearray(size))
    return buf[:size]


def _chunks(stream: Any, chunk_size: int, size: int) -> Iterator[memoryview | bytes]:
    readinto = getattr(stream, "readinto", None)
    if readinto is not None:
        # A small file needs no chunk-sized buffer (one byte more than listed shows EOF or growth).
        view = _buffer(min(chunk_size, max(size + 1, 64 << 10)))
        while True:
            n = readinto(view)
            if not n:
                return
            yield view[:n]
    else:
        while True:
            data = stream.read(chunk_size)
            if not data:
                return
            yield data


def _copy_sequential(
    stream: Any, fd: int, size: int, chunk_size: int, on_bytes: OnBytes, abandon: threading.Event, digest: Any | None
) -> tuple[int, int]:
    written = 0
    reads = 0
    for data in _chunks(stream, chunk_size, size):
        reads += 1
        if digest is not None:
            digest.update(data)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
        except OSError as err:
            raise DestinationError(err) from err
        written += len(data)
        on_bytes(len(data))
        if abandon.is_set():
            raise Abandoned()
        if written > size:
            raise SourceChanged(f"more than the listed {size} bytes")
    if written != size:
        raise SourceChanged(f"read {written} bytes, listed size {size}")
    return written, reads
