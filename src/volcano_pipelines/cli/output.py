"""What users see while a step runs: one live line on a terminal, plain timestamped status
lines in logs (only when something changed, plus a heartbeat so a quiet job still shows life)."""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

from volcano_pipelines.volcano.status import JobStatus, format_progress

HEARTBEAT_SECONDS = 60.0


def configure_logging(*, quiet: bool = False, verbose: bool = False) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    # The client's own chatter (retries, connection pool) is noise for users.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)


class ProgressPrinter:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.last_line = ""
        self.last_print = 0.0

    def __call__(self, name: str, status: JobStatus, problem: str | None) -> None:
        line = format_progress(name, status, problem)
        now = time.monotonic()
        if self.live:
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()
        elif line != self.last_line or now - self.last_print >= HEARTBEAT_SECONDS:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            self.stream.write(f"{stamp} {line}\n")
            self.stream.flush()
            self.last_print = now
        self.last_line = line

    def close(self) -> None:
        if self.live and self.last_line:
            self.stream.write("\n")
            self.stream.flush()
