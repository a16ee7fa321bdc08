"""The program of every step container of the Argo templates (no shell):

    python3 -m volcano_pipelines.argo.run SPEC VALUE [SPEC VALUE ...]

turns the SPEC VALUE pairs (argo/inputs.py) into `vpipe`'s argv, runs `vpipe` with its JSON
result going to OUT/result.json (OUT: $VPIPE_ARGO_OUT, default /tmp/vpipe), prints that result,
writes one file per scalar field under OUT/outputs/ (argo/outputs.py), and exits with vpipe's
exit code. Bad pairs (a switch that is not true/false, a timeout that is not whole seconds)
exit 2 with one line naming the parameter, before vpipe starts. When vpipe fails, the result's
message (and the last log lines of the job's failed pod) goes to the container's termination
message file, /dev/termination-log ($VPIPE_TERMINATION_LOG): Argo shows it as the node's message,
next to the exit code.

Signals. Argo's emissary runs this program as its child, in a process group of its own, and
forwards SIGTERM (`argo stop` / `argo terminate`, the pod being deleted) to that whole group
(`osspecific.Kill(-pgid)`); when its child exits, emissary (PID 1) exits and the kernel kills
whatever is left in the container. So `vpipe` runs in this process's group (it receives the
SIGTERM itself and applies its on-cancel cleanup), while this process ignores SIGTERM and
SIGINT and waits for it: it exits only after vpipe has finished its cleanup. A shell in this
place (`sh -c`) died at the first SIGTERM and took vpipe's cleanup with it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from volcano_pipelines.argo.outputs import read_result, termination_message, write_output_files
from volcano_pipelines.signals import stop_signals_handled_by

__all__ = ["BadPair", "argv_from_pairs", "main"]

DEFAULT_OUT = "/tmp/vpipe"
TERMINATION_LOG = "/dev/termination-log"  # Kubernetes' default terminationMessagePath
WHOLE_SECONDS = re.compile(r"[0-9]+")


class BadPair(ValueError):
    """A parameter value the spec does not allow (exit 2)."""


def _flag(spec: str) -> str:
    return spec[1:]


def argv_from_pairs(pairs: Sequence[str]) -> list[str]:
    """SPEC VALUE pairs -> argv words (the specs are documented in argo/inputs.py)."""
    if len(pairs) % 2:
        raise BadPair(f"an odd number of SPEC VALUE words ({len(pairs)})")
    argv: list[str] = []
    for spec, value in zip(pairs[::2], pairs[1::2], strict=True):
        if spec == ".":
            argv.append(value)
        elif spec == "_":
            if value:
                argv.append(value)
        elif spec[:1] in ("?", "!"):
            if value not in ("true", "false"):
                raise BadPair(f"invalid {_flag(spec)}={value}: true or false")
            if (spec[0] == "?") == (value == "true"):
                argv.append(_flag(spec))
        elif spec[:1] == "#":
            # Whole seconds: Argo's own deadline is computed from this value.
            if value and not WHOLE_SECONDS.fullmatch(value):
                raise BadPair(f"invalid {_flag(spec)}={value}: whole seconds (an integer such as 3600)")
            if value:
                argv += [_flag(spec), value]
        elif spec == "+" or spec[:1] == "*":
            for line in value.splitlines():
                if line:
                    argv += [line] if spec == "+" else [_flag(spec), line]
        elif value:
            argv += [spec, value]
    return argv


def _default_signals() -> None:
    """In the child, before exec: SIGTERM and SIGINT as usual (an ignored signal stays ignored
    across exec), so vpipe's own handlers take them."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def _write_termination_message(text: str) -> None:
    """Into the file the kubelet provides (never created here: outside a pod there is none)."""
    path = Path(os.environ.get("VPIPE_TERMINATION_LOG") or TERMINATION_LOG)
    if text and path.is_file():
        try:
            path.write_text(text)
        except OSError as err:
            print(f"vpipe: warning: cannot write the termination message to {path}: {err}", file=sys.stderr)


def main(pairs: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if pairs is None else pairs)
    try:
        argv = argv_from_pairs(words)
    except BadPair as err:
        print(f"vpipe: error: {err}", file=sys.stderr)
        return 2
    out = Path(os.environ.get("VPIPE_ARGO_OUT") or DEFAULT_OUT)
    (out / "outputs").mkdir(parents=True, exist_ok=True)
    result = out / "result.json"
    # vpipe gets the group's SIGTERM itself; this process only waits for it to finish.
    with stop_signals_handled_by(signal.SIG_IGN), result.open("wb") as stdout:
        child = subprocess.Popen(["vpipe", *argv], stdout=stdout, preexec_fn=_default_signals)
        code = child.wait()
    sys.stdout.write(result.read_text(errors="replace"))
    sys.stdout.flush()
    parsed = read_result(result)
    write_output_files(parsed, out / "outputs")
    if code != 0:
        _write_termination_message(termination_message(parsed))
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


if __name__ == "__main__":
    sys.exit(main())
