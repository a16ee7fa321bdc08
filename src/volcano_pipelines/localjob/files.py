"""Files the local backend writes for a job (Volcano's svc files, job.json): whole or not at
all. Each is written beside its name and renamed into place; a write that fails (a full disk:
ENOSPC, a read-only one) removes what it wrote, so no half-written hosts file is left for a
later attempt or a reader to find."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["write_whole"]


def write_whole(path: Path, text: str, mode: int = 0o644) -> None:
    """Write `text` to `path` (permissions `mode`) by rename; on OSError nothing new is left."""
    tmp = path.with_name(f".{path.name}.tmp")
    data = memoryview(text.encode("utf-8"))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.fchmod(fd, mode)  # not widened by the umask, and kept when the file existed
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename is None:  # os.write names no file: say which
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
