"""A program run under a real pseudo-terminal, and what a person would then see: the bytes
replayed through a small terminal (the cursor moves and erases a live display uses), so a test
reads the final screen and its scrollback as lines, the way tmux or `script` shows them."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass

_ESCAPE = re.compile(rb"\x1b\[([?0-9;]*)([A-Za-z])|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


@dataclass
class Run:
    code: int
    raw: bytes  # every byte the program wrote to its terminal
    lines: list[str]  # scrollback and screen, as a person reads them after it ended


def replay(data: bytes, columns: int) -> list[str]:
    """The lines a terminal `columns` wide shows after `data` (scrollback kept): printable
    text, CR, LF, cursor up / down / to a column, erase line; colours ignored. Long lines wrap."""
    lines: list[list[str]] = [[]]
    row = col = 0

    def put(char: str) -> None:
        nonlocal row, col
        if col >= columns:
            row, col = row + 1, 0
            while len(lines) <= row:
                lines.append([])
        line = lines[row]
        line.extend(" " * (col - len(line) + 1) if len(line) <= col else "")
        line[col] = char
        col += 1

    text_start = 0
    for match in [*_ESCAPE.finditer(data), None]:
        end = match.start() if match else len(data)
        for char in data[text_start:end].decode("utf-8", "replace"):
            if char == "\n":
                row, col = row + 1, 0
                while len(lines) <= row:
                    lines.append([])
            elif char == "\r":
                col = 0
            elif char == "\b":
                col = max(0, col - 1)
            elif char >= " " or char == "\t":
                put(char)
        if match is None:
            break
        text_start = match.end()
        params, command = (match.group(1) or b"").decode(), (match.group(2) or b"").decode()
        number = int(params) if params.isdigit() else 1
        if command == "A":
            row = max(0, row - number)
        elif command == "B":
            row += number
            while len(lines) <= row:
                lines.append([])
        elif command == "G":
            col = number - 1
        elif command == "K":
            mode = int(params or 0)
            line = lines[row]
            if mode == 2:
                line.clear()
            elif mode == 0:
                del line[col:]
    return ["".join(line).rstrip() for line in lines]


def run_in_terminal(argv: Sequence[str], *, rows: int = 40, columns: int = 120, timeout: float = 300,
                    env: dict[str, str] | None = None, cwd: str | None = None) -> Run:
    """Run `argv` with a pseudo-terminal as its stdin, stdout and stderr."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full_env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows), **(env or {})}
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM_PROGRAM"):
        full_env.pop(name, None)
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, env=full_env, cwd=cwd,
                            start_new_session=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            elif proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                raise AssertionError(f"{argv} ran past {timeout}s; its terminal:\n"
                                     + "\n".join(replay(b"".join(chunks), columns)[-60:]))
        code = proc.wait(30)
    finally:
        os.close(master)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    raw = b"".join(chunks)
    return Run(code=code, raw=raw, lines=replay(raw.replace(b"\r\n", b"\n"), columns))
