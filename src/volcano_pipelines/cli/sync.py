"""`vpipe sync SRC DST`: arguments in, step call, report out (docs/sync.md)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from volcano_pipelines.errors import EXIT_OK, InputError, VpipeError
from volcano_pipelines.steps import DEFAULT_MAX_DELETE, DEFAULT_TRANSFERS, TransferProgress, display_path, quoted_path
from volcano_pipelines.steps import sync as sync_step
from volcano_pipelines.steps import DEFAULT_DURABILITY, DEFAULT_STREAMS, DURABILITY_MODES
from volcano_pipelines.cli.flags import add_step_flags, flag_for, step_kwargs
from volcano_pipelines.cli.generic import print_result
from volcano_pipelines.interface.params import params
from volcano_pipelines.steps.registry import Step

if TYPE_CHECKING:
    from volcano_pipelines.steps import SyncResult

LOG_EVERY_SECONDS = 10.0
log = logging.getLogger("volcano_pipelines.sync")

# The step's keyword parameters and the flags (or positional arguments) they come from:
# an InputError names the parameter, the user is shown what they typed.
FLAGS: dict[str, str] = {
    "src": "SRC",
    "dst": "DST",
    "include": "--include",
    "exclude": "--exclude",
    "checksum": "--checksum",
    "delete": "--delete",
    "max_delete": "--max-delete",
    "force_delete": "--force-delete",
    "dry_run": "--dry-run",
    "transfers": "--transfers",
    "shards": "--shards",
    "user": "--user",
    "kerberos_principal": "--kerberos-principal",
    "kerberos_keytab": "--kerberos-keytab",
    "kerberos_ccache": "--kerberos-ccache",
    "hadoop_conf_dir": "--hadoop-conf-dir",
    "chunk_mib": "--chunk-mib",
    "full_scan": "--full-scan",
    "durability": "--durability",
    "streams": "--streams",
}


def register_step(p: argparse.ArgumentParser, item: Step) -> None:
    """Fill in `vpipe sync` (the parser cli/__init__.py made from the registry, with its help line)."""
    p.description = ("Copy new and changed files from SRC (hdfs://, viewfs://, webhdfs://, file://, "
                     "a path) into the directory DST (the mounted PVC): parallel, atomic, verified.")
    # Each flag's help is the step's own (its docstring); argparse formats help with %.
    docs = {param.name: param for param in params(sync_step)}

    def text(name: str) -> str:
        param = docs[name]
        shown = f" (default {param.default})" if param.default not in (None, False, (), "") else ""
        return (param.help + shown).replace("%", "%%")

    p.add_argument("src", help=text("src"))
    p.add_argument("dst", help=text("dst"))
    p.add_argument("--include", action="append", default=[], metavar="GLOB", help=text("include"))
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB", help=text("exclude"))
    p.add_argument("--checksum", action="store_true", help=text("checksum"))
    p.add_argument("--delete", action="store_true", help=text("delete"))
    p.add_argument("--max-delete", default=DEFAULT_MAX_DELETE, metavar="N|P%", help=text("max_delete"))
    p.add_argument("--force-delete", action="store_true", help=text("force_delete"))
    p.add_argument("--dry-run", action="store_true", help=text("dry_run"))
    p.add_argument("--full-scan", action="store_true", help=text("full_scan"))
    p.add_argument("--transfers", type=int, default=DEFAULT_TRANSFERS, help=text("transfers"))
    p.add_argument("--shards", type=int, default=0, metavar="N", help=text("shards"))
    p.add_argument("--chunk-mib", type=int, default=8, help=text("chunk_mib"))
    p.add_argument("--streams", type=int, default=DEFAULT_STREAMS, help=text("streams"))
    p.add_argument("--durability", default=DEFAULT_DURABILITY, metavar="|".join(DURABILITY_MODES), help=text("durability"))
    auth = p.add_argument_group("HDFS access")
    for name in ("user", "kerberos_principal", "kerberos_keytab", "kerberos_ccache", "hadoop_conf_dir"):
        auth.add_argument("--" + name.replace("_", "-"), help=text(name))
    # The copy pods' inputs (--workers N): flags made from the step's signature and help.
    add_step_flags(p, sync_step, (), skip=[*FLAGS, "progress"],
                   titles={"job": "copy pods (with --workers above 1: one Volcano Job of copy pods)",
                           "run": "cluster (with --workers above 1)"})
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(handler=_sync)


class _Printer(TransferProgress):
    """A one-line bar on a terminal; otherwise a status line every `interval` seconds
    (files and bytes done so far) from a ticker thread, and one at the end."""

    def __init__(
        self,
        stream: TextIO,
        quiet: bool,
        interval: float = LOG_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.stream = stream
        self.quiet = quiet
        self.live = stream.isatty() and not quiet
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self.last = 0.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def start(self, files: int, nbytes: int) -> None:
        super().start(files, nbytes)
        if not self.live and not self.quiet:
            self._ticker = threading.Thread(target=self.log_lines, args=(self._stop.wait,), name="sync-progress", daemon=True)
            self._ticker.start()

    def log_lines(self, wait: Callable[[float], bool]) -> None:
        """A status line after each `interval` until `wait` returns True (the run ended).
        Lines come whether or not a chunk finished: a stalled copy shows as a stall."""
        while not wait(self.interval):
            self._write_log(self._status())

    def changed(self) -> None:
        if not self.live:
            return  # the ticker logs
        now = self.clock()
        if now - self.last < 0.2:
            return
        with self.lock:
            if now - self.last < 0.2:
                return
            self.last = now
            self.stream.write("\r\x1b[2K" + self._bar(now))
            self.stream.flush()

    def planned(self, summary: str) -> None:
        if not self.quiet:
            self._write_log(summary)

    def stopping(self, message: str) -> None:
        if self.quiet:
            return
        # No lock: this runs in the SIGINT handler, maybe while a transfer thread holds it.
        self.stream.write(("\n" if self.live and self.last else "") + f"vpipe: {message}\n")
        self.stream.flush()

    def _write_log(self, line: str) -> None:
        self.stream.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")
        self.stream.flush()

    def _counts(self, now: float) -> tuple[float, str]:
        elapsed = max(now - self.started, 1e-6)
        pct = 100.0 * self.bytes_done / self.bytes_total if self.bytes_total else 100.0
        text = (
            f"files {self.files_done}/{self.files_total} "
            f"{self.bytes_done / 1e6:.1f}/{self.bytes_total / 1e6:.1f} MB {self.bytes_done / 1e6 / elapsed:.1f} MB/s"
        )
        return pct, text

    def _bar(self, now: float) -> str:
        pct, text = self._counts(now)
        width = 24
        filled = int(width * pct / 100)
        return f"sync [{'#' * filled}{'.' * (width - filled)}] {pct:5.1f}% {text}"

    def _status(self) -> str:
        now = self.clock()
        pct, text = self._counts(now)
        return f"sync: {pct:.1f}% {text}, {now - self.started:.0f}s elapsed"

    def finish(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        if self.quiet or not self.files_total:
            return  # nothing was to be copied: the report says it all
        if self.live:
            if self.last:
                self.stream.write("\r\x1b[2K" + self._bar(self.clock()) + "\n")
                self.stream.flush()
        else:
            self._write_log(self._status())


# Signals that end a sync the way Ctrl-C does: SIGTERM (a cancelled pipeline step, `kill`) and
# SIGHUP (a closed terminal). Their default action kills the process on the spot: no report,
# and the temporary file of the copy in flight left behind.
STOP_LIKE_CTRL_C = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _stops_like_ctrl_c(printer: _Printer) -> Iterator[list[int]]:
    """SIGTERM and SIGHUP call whatever handles SIGINT at that moment (the copy's "stop after the
    files in flight", or KeyboardInterrupt while planning); yields the signals received. Main
    thread only; a signal someone chose to ignore (nohup) stays ignored."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        printer.stopping(f"{signal.Signals(signum).name} received")
        on_int = signal.getsignal(signal.SIGINT)
        if callable(on_int):
            on_int(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    previous = {sig: signal.getsignal(sig) for sig in STOP_LIKE_CTRL_C}
    for sig, old in previous.items():
        if old is not signal.SIG_IGN:
            signal.signal(sig, handler)
    try:
        yield received
    finally:
        for sig, old in previous.items():
            if old is not signal.SIG_IGN and old is not None:
                signal.signal(sig, old)


def _sync(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    printer = _Printer(sys.stderr, args.quiet)
    with _stops_like_ctrl_c(printer) as received:
        code = _run_sync(args, printer)
    # A stop by SIGTERM / SIGHUP ends with the status a shell expects of it (128 + the signal).
    code = 128 + received[0] if received and code != EXIT_OK else code
    from volcano_pipelines.steps import threads_left_behind

    if code != EXIT_OK and threads_left_behind():
        # Abandoned transfers stuck in a source read (their temporary files are already removed, the
        # report printed): Python would wait for those threads at exit, for as long as the source stalls.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run_sync(args: argparse.Namespace, printer: _Printer) -> int:
    from volcano_pipelines.steps import DeletionRefused, SyncFailed, SyncInterrupted, sync

    try:
        result = sync(
            args.src,
            args.dst,
            include=args.include,
            exclude=args.exclude,
            checksum=args.checksum,
            delete=args.delete,
            max_delete=args.max_delete,
            force_delete=args.force_delete,
            dry_run=args.dry_run,
            transfers=args.transfers,
            shards=args.shards,
            user=args.user,
            kerberos_principal=args.kerberos_principal,
            kerberos_keytab=args.kerberos_keytab,
            kerberos_ccache=args.kerberos_ccache,
            hadoop_conf_dir=args.hadoop_conf_dir,
            chunk_mib=args.chunk_mib,
            full_scan=args.full_scan,
            durability=args.durability,
            streams=args.streams,
            progress=printer,
            **_copy_pod_kwargs(args),
        )
    except SyncInterrupted as err:
        return _fail(args, err.result, str(err), err.exit_code)
    except DeletionRefused as err:
        # Refused before anything was done: a report (or a dry run's plan) on stdout would read as
        # work done or to be done; --json keeps it, with the error in it.
        return _fail(args, err.result if args.json else None, cli_message(err), err.exit_code)
    except SyncFailed as err:
        return _fail(args, err.result, cli_message(err), err.exit_code)
    except VpipeError as err:
        return _fail(args, None, cli_message(err), err.exit_code)
    _print_result(result, args)
    return EXIT_OK


def _copy_pod_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The values of the flags `add_step_flags` made (the copy pods' inputs)."""
    return {k: v for k, v in step_kwargs(args, sync_step, (), ()).items() if k not in FLAGS and k != "progress"}


def cli_message(err: VpipeError) -> str:
    """The error as the user should read it: flags and positional names (FLAGS) instead
    of the step's keyword parameters, with the value as given."""
    from volcano_pipelines.steps import DeletionRefused

    if isinstance(err, DeletionRefused):
        return err.describe(f"{FLAGS['max_delete']} {{}}", FLAGS["force_delete"])
    if isinstance(err, InputError):
        allowed = err.allowed.replace("only with delete", f"only with {FLAGS['delete']}")
        flag = FLAGS.get(err.field) or flag_for(sync_step, err.field, ()) or err.field
        return str(InputError(flag, err.value, allowed))
    return str(err)


def _fail(args: argparse.Namespace, result: SyncResult | None, message: str, code: int) -> int:
    """The report (what was done; with --json always, with the error in it), then the
    error line on stderr: a failed run says what it did, docs/sync.md."""
    if result is None and args.json:
        from volcano_pipelines.steps import sync_report

        result = sync_report(args.src, args.dst, args.dry_run)
    if result is not None:
        result.error = message
        _print_result(result, args)
    print(f"vpipe: error: {message}", file=sys.stderr)
    return code


def _print_result(result: SyncResult, args: argparse.Namespace) -> None:
    if args.json:
        print_result(result, as_json=True)  # every command's --json looks the same (train's too)
        return
    if result.dry_run:
        for item in result.plan:
            if item["action"] != "skip":
                print(f"{item['action']:8} {display_path(item['path'])}  ({item['reason']})")
        print(f"dry run: would copy {result.copied}, skip {result.skipped}, delete {result.deleted}, "
              f"clean {result.cleaned}, reject {result.failed}")
        return
    print(result.summary())
    for failure in result.failures:
        print(f"failed: {quoted_path(failure['path'])}: {failure['error']}")
    if args.quiet and result.shard_manifests:  # -q: one line, however many shards
        print(f"shard manifests: {len(result.shard_manifests)} in {display_path(os.path.dirname(result.shard_manifests[0]))}")
        return
    for path in result.shard_manifests:
        print(f"shard manifest: {path}")
