"""`python -m tests.unit.transfer.gated_fs sync gated:///abs/dir DST ...` is `vpipe sync`
with one more fsspec protocol, `gated://`: the local file system, except that the first
read of each file writes "open <path>" to $VPIPE_TEST_LOG and then waits for one byte on
the FIFO $VPIPE_TEST_GATE. A test can so hold a real sync process in the middle of a
copy (its temporary file created, the destination lock held) for as long as it needs,
send it signals, and let it go on - without sleeping or timing anything."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from fsspec import register_implementation
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "gated"


class _GatedReader:
    def __init__(self, inner: Any, path: str) -> None:
        self._inner = inner
        self._path = path
        self._waited = False

    def read(self, n: int = -1) -> bytes:
        if not self._waited:
            self._waited = True
            with open(os.environ["VPIPE_TEST_LOG"], "a") as log:
                log.write(f"open {self._path}\n")
            gate = os.open(os.environ["VPIPE_TEST_GATE"], os.O_RDWR)  # RDWR: never blocks on open
            try:
                os.read(gate, 1)
            finally:
                os.close(gate)
        return self._inner.read(n)

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> _GatedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GatedFileSystem(LocalFileSystem):
    protocol = (PROTOCOL,)

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        path = str(path)
        if path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3 :]
        return super()._strip_protocol(path)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        inner = super()._open(path, mode, **kwargs)
        return _GatedReader(inner, path) if "r" in mode else inner


def main() -> int:
    # The Ctrl-C tests rely on Python's own SIGINT handler here. Python installs it only
    # where SIGINT was not ignored at start, and a test run started with SIGINT ignored
    # (`scripts/test &` from a script, nohup) passes the ignoring on to this process.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # nohup'd runs pass an ignored SIGHUP on too
        signal.signal(sig, signal.SIG_DFL)
    register_implementation(PROTOCOL, GatedFileSystem, clobber=True)
    from volcano_pipelines.cli import main as vpipe

    return vpipe(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
