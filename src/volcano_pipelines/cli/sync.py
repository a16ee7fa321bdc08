"""`vpipe sync SRC DST`: arguments in, step call, report out (docs/sync.md)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TextIO

from volcano_pipelines.errors import EXIT_OK, VpipeError
from volcano_pipelines.transfer.executor import DEFAULT_TRANSFERS
from volcano_pipelines.transfer.report import Progress

LOG_EVERY_SECONDS = 10.0
log = logging.getLogger("volcano_pipelines.sync")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sync",
        help="stage a dataset from HDFS / WebHDFS / a directory into a mounted volume",
        description="Copy new and changed files from SRC (hdfs://, viewfs://, webhdfs://, file://, "
        "a path) into the directory DST (the mounted PVC): parallel, atomic, verified.",
    )
    p.add_argument("src", help="hdfs://nn:8020/path, hdfs://nameservice/path, viewfs://..., webhdfs://host:9870/path, file:///path")
    p.add_argument("dst", help="destination directory (the mounted volume)")
    p.add_argument("--include", action="append", default=[], metavar="GLOB", help="only files matching (repeatable); '**' crosses directories")
    p.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip files matching (repeatable)")
    p.add_argument("--checksum", action="store_true", help="compare and verify by content hash, not size + mtime")
    p.add_argument("--delete", action="store_true", help="remove destination files that are not in the source")
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("--full-scan", action="store_true",
                   help="read every destination directory instead of reusing the listings of unchanged ones "
                        "(DST/.vpipe/scan-cache.json); also finds files edited in place by other writers")
    p.add_argument("--transfers", type=int, default=DEFAULT_TRANSFERS, help=f"parallel file transfers (default {DEFAULT_TRANSFERS})")
    p.add_argument("--shards", type=int, default=0, metavar="N", help="write N manifests balanced by bytes under DST/.vpipe/shards/")
    p.add_argument("--chunk-mib", type=int, default=8, help="streaming chunk size in MiB (default 8)")
    auth = p.add_argument_group("HDFS access")
    auth.add_argument("--user", help="simple-auth user (default: $HADOOP_USER_NAME or the login user)")
    auth.add_argument("--kerberos-principal", help="Kerberos principal (with --kerberos-keytab, or a ticket cache)")
    auth.add_argument("--kerberos-keytab", help="keytab file for --kerberos-principal")
    auth.add_argument("--kerberos-ccache", help="Kerberos ticket cache (default: KRB5CCNAME)")
    auth.add_argument("--hadoop-conf-dir", help="directory with core-site.xml / hdfs-site.xml (default: $HADOOP_CONF_DIR)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p.set_defaults(handler=_sync)


class _Printer(Progress):
    """A one-line bar on a terminal, a log line every few seconds otherwise."""

    def __init__(self, stream: TextIO, quiet: bool) -> None:
        super().__init__()
        self.stream = stream
        self.quiet = quiet
        self.live = stream.isatty() and not quiet
        self.started = time.monotonic()
        self.last = 0.0

    def changed(self) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        interval = 0.2 if self.live else LOG_EVERY_SECONDS
        if now - self.last < interval:
            return
        with self.lock:
            if now - self.last < interval:
                return
            self.last = now
            line = self._line(now)
            if self.live:
                self.stream.write("\r\x1b[2K" + line)
            else:
                self.stream.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n")
            self.stream.flush()

    def planned(self, summary: str) -> None:
        if not self.quiet:
            self.stream.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {summary}\n")
            self.stream.flush()

    def _line(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-6)
        pct = 100.0 * self.bytes_done / self.bytes_total if self.bytes_total else 100.0
        width = 24
        filled = int(width * pct / 100)
        bar = "#" * filled + "." * (width - filled)
        return (
            f"sync [{bar}] {pct:5.1f}% files {self.files_done}/{self.files_total} "
            f"{self.bytes_done / 1e6:.1f}/{self.bytes_total / 1e6:.1f} MB {self.bytes_done / 1e6 / elapsed:.1f} MB/s"
        )

    def finish(self) -> None:
        if self.live and self.last:
            self.stream.write("\r\x1b[2K" + self._line(time.monotonic()) + "\n")
            self.stream.flush()


def _sync(args: argparse.Namespace) -> int:
    from volcano_pipelines.steps.sync import SyncFailed, sync

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    printer = _Printer(sys.stderr, args.quiet)
    try:
        result = sync(
            args.src,
            args.dst,
            include=args.include,
            exclude=args.exclude,
            checksum=args.checksum,
            delete=args.delete,
            dry_run=args.dry_run,
            transfers=args.transfers,
            shards=args.shards,
            user=args.user,
            kerberos_principal=args.kerberos_principal,
            kerberos_keytab=args.kerberos_keytab,
            kerberos_ccache=args.kerberos_ccache,
            hadoop_conf_dir=args.hadoop_conf_dir,
            chunk_size=args.chunk_mib << 20,
            full_scan=args.full_scan,
            progress=printer,
        )
    except SyncFailed as err:
        _print_result(err.result, args)
        print(f"vpipe: error: {err}", file=sys.stderr)
        return err.exit_code
    except VpipeError:
        raise
    _print_result(result, args)
    return EXIT_OK


def _print_result(result: object, args: argparse.Namespace) -> None:
    from volcano_pipelines.steps.sync import SyncResult

    assert isinstance(result, SyncResult)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    if result.dry_run:
        for item in result.plan:
            if item["action"] != "skip":
                print(f"{item['action']:8} {item['path']}  ({item['reason']})")
        print(f"dry run: would copy {result.copied}, skip {result.skipped}, delete {result.deleted}, "
              f"clean {result.cleaned}, reject {result.failed}")
        return
    print(result.summary())
    for failure in result.failures:
        print(f"failed: {failure['path']!r}: {failure['error']}")
    for path in result.shard_manifests:
        print(f"shard manifest: {path}")


def main(argv: list[str] | None = None) -> int:
    """`python -m volcano_pipelines.cli.sync SRC DST ...` is `vpipe sync SRC DST ...`."""
    from volcano_pipelines.cli import main as vpipe

    return vpipe(["sync", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
