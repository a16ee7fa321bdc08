"""Where data comes from: HDFS / ViewFS over native RPC (hdfs-native), WebHDFS and other
fsspec protocols, and local directories. Every source lists relative `Entry` values and
opens a file for streaming; transient errors are retried with backoff."""

from __future__ import annotations

import logging
import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeVar, cast

from volcano_pipelines.errors import ClusterError, InputError
from volcano_pipelines.transfer.hdfs_readers import HDFS_PACKETS as HDFS_PACKETS  # re-exported: tests, benchmarks
from volcano_pipelines.transfer.hdfs_readers import HDFS_READINTO, HdfsBufferReader, HdfsReader, hdfs_read_path
from volcano_pipelines.transfer.namenode_probe import check_namenodes
from volcano_pipelines.transfer.plan import Entry
from volcano_pipelines.transfer.retries import http_status, short_error, with_retries
from volcano_pipelines.transfer.urls import (
    DEFAULT_WEBHDFS_PORT,
    Location,
    load_hadoop_conf,
    namenode_rpc_addresses,
)

if TYPE_CHECKING:  # imported where used: http.client and ssl cost every hdfs:// run ~12 ms
    from volcano_pipelines.transfer.webhdfs import WebHdfsData

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Auth:
    """Simple-auth user and / or Kerberos (principal + keytab, or a ticket cache). Never logged."""

    user: str | None = None
    kerberos_principal: str | None = None
    kerberos_keytab: str | None = None
    kerberos_ccache: str | None = None
    hadoop_conf_dir: str | None = None


class Source(Protocol):
    description: str
    # How file data is read (SyncResult.read_path, docs/sync.md): e.g. "hdfs-readinto".
    read_path: str

    def list(self) -> tuple[list[Entry], list[tuple[str, str]]]:
        """(regular files, (path, reason) of entries refused, e.g. symlinks)."""
        ...

    def stat(self, rel: str) -> Entry: ...

    def open(self, rel: str) -> BinaryIO: ...

    def close(self) -> None: ...


class SourceMissing(Exception):
    pass


# ---------------------------------------------------------------------------- local


class LocalSource:
    snapshot_reads = False  # local files can be edited in place
    read_path = "local-readinto"

    def __init__(self, root: str) -> None:
        self.root = root
        self.description = f"file://{root}"
        self._single_file: bool | None = None  # the root names a file (known after the first look)

    def _abs(self, rel: str) -> str:
        return self.root if rel == "" else os.path.join(self.root, rel)

    def list(self) -> tuple[list[Entry], list[tuple[str, str]]]:
        try:
            st = os.stat(self.root)
        except FileNotFoundError as err:
            raise SourceMissing(self.root) from err
        self._single_file = stat.S_ISREG(st.st_mode)
        if self._single_file:
            return [Entry(os.path.basename(self.root), st.st_size, st.st_mtime_ns // 1_000_000)], []
        files: list[Entry] = []
        refused: list[tuple[str, str]] = []
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            with os.scandir(self._abs(rel_dir)) as it:
                for de in it:
                    rel = f"{rel_dir}/{de.name}" if rel_dir else de.name
                    if de.is_symlink():
                        refused.append((rel, "symbolic link (not followed)"))
                    elif de.is_dir(follow_symlinks=False):
                        stack.append(rel)
                    elif de.is_file(follow_symlinks=False):
                        s = de.stat(follow_symlinks=False)
                        files.append(Entry(rel, s.st_size, s.st_mtime_ns // 1_000_000))
                    else:
                        refused.append((rel, "not a regular file"))
        return files, refused

    def _single(self) -> bool:
        if self._single_file is None:
            self._single_file = os.path.isfile(self.root)
        return self._single_file

    def stat(self, rel: str) -> Entry:
        path = self.root if self._single() else self._abs(rel)
        s = os.lstat(path)
        return Entry(rel, s.st_size, s.st_mtime_ns // 1_000_000)

    def open(self, rel: str) -> BinaryIO:
        path = self.root if self._single() else self._abs(rel)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        return os.fdopen(fd, "rb", buffering=0)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- HDFS (native RPC)


class _RootedTree:
    """A remote source rooted at one path that names a directory or a single file (known after
    `list`): every protocol maps relative paths to its own the same way."""

    root: str
    _single: bool | None

    def _abs(self, rel: str) -> str:
        if self._single or rel == "":
            return self.root
        return self.root.rstrip("/") + "/" + rel


class HdfsSource(_RootedTree):
    # HDFS files are replaced, not edited in place: one read() returns one version.
    snapshot_reads = True

    def __init__(self, location: Location, auth: Auth) -> None:
        from hdfs_native import Client

        self.location = location
        self.root = location.path
        self.description = location.url
        conf = load_hadoop_conf(auth.hadoop_conf_dir)
        if location.scheme == "hdfs":
            # Before hdfs-native: it waits without a deadline on a port that never answers RPC.
            check_namenodes(namenode_rpc_addresses(location, conf))
        if auth.user:
            # hdfs-native takes the simple-auth user from the environment, like Hadoop.
            os.environ["HADOOP_USER_NAME"] = auth.user
        kwargs: dict[str, Any] = {}
        if auth.kerberos_principal:
            kwargs["kerberos_principal"] = auth.kerberos_principal
        if auth.kerberos_keytab:
            kwargs["kerberos_keytab"] = auth.kerberos_keytab
        if auth.kerberos_ccache:
            kwargs["kerberos_cache"] = auth.kerberos_ccache
        conf_dir = auth.hadoop_conf_dir or os.environ.get("HADOOP_CONF_DIR")
        url = f"{location.scheme}://{location.authority}" if location.authority else None
        try:
            self.client = Client(url, config_dir=conf_dir, **kwargs)
        except Exception as err:
            raise ClusterError(f"cannot create an HDFS client for {location.url}: {err}") from err
        self._single: bool | None = None
        self.read_path = hdfs_read_path()
        self._reader = HdfsBufferReader if self.read_path == HDFS_READINTO else HdfsReader

    def list(self) -> tuple[list[Entry], list[tuple[str, str]]]:
        def go() -> tuple[list[Entry], list[tuple[str, str]]]:
            try:
                top = self.client.get_file_info(self.root)
            except FileNotFoundError as err:
                raise SourceMissing(self.root) from err
            if not top.isdir:
                self._single = True
                return [Entry(self.root.rsplit("/", 1)[-1], top.length, top.modification_time)], []
            self._single = False
            prefix = self.root.rstrip("/") + "/"
            files = []
            for st in self.client.list_status(self.root, recursive=True):
                if st.isdir:
                    continue
                path = st.path
                rel = path[len(prefix) :] if path.startswith(prefix) else path.lstrip("/")
                files.append(Entry(rel, st.length, st.modification_time))
            return files, []

        return with_retries(f"listing {self.description}", go)

    def stat(self, rel: str) -> Entry:
        st = with_retries(f"stat {rel}", lambda: self.client.get_file_info(self._abs(rel)))
        return Entry(rel, st.length, st.modification_time)

    def open(self, rel: str) -> BinaryIO:
        return self._reader(self.client.read(self._abs(rel)))  # type: ignore[return-value]

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------- fsspec (webhdfs, ...)


class FsspecSource(_RootedTree):
    snapshot_reads = False
    read_path = "fsspec-read"

    def __init__(self, location: Location, auth: Auth) -> None:
        import fsspec

        self.location = location
        self.description = location.url
        self.root = location.path
        options: dict[str, Any] = {}
        if location.scheme == "webhdfs":
            host, _, port = location.authority.rpartition(":")
            if not host:
                host, port = location.authority, str(DEFAULT_WEBHDFS_PORT)
            if not host:
                raise InputError("src", location.url, "webhdfs://host:port/path")
            check_tcp_reachable(host, int(port))
            options = {"host": host, "port": int(port)}
            if auth.user:
                options["user"] = auth.user
            if auth.kerberos_principal or auth.kerberos_ccache:
                options["kerberos"] = True  # SPNEGO through requests-kerberos (ticket cache)
            self.fs = fsspec.filesystem("webhdfs", **options)
            if not options.get("kerberos"):
                # File data without fsspec (transfer/webhdfs.py); listings stay with fsspec.
                from volcano_pipelines.transfer.webhdfs import WebHdfsData  # http.client: only for webhdfs://

                self._data = WebHdfsData(host, int(port), auth.user)
                self.read_path = "webhdfs-readinto"
        else:
            # fsspec's own URL parsing: the host / bucket / credentials in the URL go to
            # the file system's constructor, the rest is the path in its own form.
            self.fs, self.root = fsspec.core.url_to_fs(location.url)
        self._single = False

    _data: WebHdfsData | None = None

    @staticmethod
    def _mtime_ms(info: dict[str, Any]) -> int:
        for key in ("modificationTime", "mtime", "LastModified", "last_modified", "created"):
            value = info.get(key)
            if value is None:
                continue
            if hasattr(value, "timestamp"):
                return int(value.timestamp() * 1000)
            value = float(value)
            return int(value) if key == "modificationTime" else int(value * 1000)
        return 0

    def _answering(self, what: str, fn: Callable[[], T]) -> T:
        """`fn` under the retry policy; for webhdfs://, an answer that is not WebHDFS's (a
        plain web server's page, another service's JSON) is a ClusterError saying so."""
        try:
            return with_retries(what, fn)
        except (KeyError, TypeError, ValueError) as err:  # JSON without FileStatus, HTML, ...
            if self.location.scheme != "webhdfs":
                raise
            raise ClusterError(f"{what} failed: {self.location.authority} does not answer like a WebHDFS "
                               f"(NameNode HTTP) server: {short_error(err)}") from err
        except OSError as err:
            status = http_status(err)
            if self.location.scheme != "webhdfs" or status is None:
                raise
            kind = str(getattr(getattr(err, "response", None), "headers", {}).get("Content-Type", "")).split(";")[0]
            if kind == "application/json":
                raise  # a RemoteException fsspec did not map: the NameNode's own words
            raise ClusterError(f"{what} failed: {self.location.authority} answered HTTP {status} "
                               f"({kind or 'no content type'}), not like a WebHDFS (NameNode HTTP) server") from err

    def list(self) -> tuple[list[Entry], list[tuple[str, str]]]:
        def go() -> tuple[list[Entry], list[tuple[str, str]]]:
            try:
                info = self.fs.info(self.root)
            except FileNotFoundError as err:
                raise SourceMissing(self.root) from err
            if info.get("type") != "directory":
                self._single = True
                return [Entry(self.root.rsplit("/", 1)[-1], int(info["size"]), self._mtime_ms(info))], []
            # Protocols differ on a leading "/" (webhdfs, memory: yes; s3: "bucket/key").
            prefix = self.root.strip("/") + "/" if self.root.strip("/") else ""
            files = []
            for path, meta in self.fs.find(self.root, detail=True, withdirs=False).items():
                path = path.lstrip("/")
                rel = path[len(prefix) :] if path.startswith(prefix) else path
                files.append(Entry(rel, int(meta["size"]), self._mtime_ms(meta)))
            return files, []

        return self._answering(f"listing {self.description}", go)

    def stat(self, rel: str) -> Entry:
        info = self._answering(f"stat {rel}", lambda: self.fs.info(self._abs(rel)))
        return Entry(rel, int(info["size"]), self._mtime_ms(info))

    def open(self, rel: str) -> BinaryIO:
        if self._data is not None:
            from volcano_pipelines.transfer.webhdfs import WebHdfsFile

            return cast(BinaryIO, WebHdfsFile(self._data, self._abs(rel)))
        return cast(BinaryIO, self.fs.open(self._abs(rel), "rb", block_size=8 << 20))

    def close(self) -> None:
        pass


def check_tcp_reachable(host: str, port: int) -> None:
    try:
        with socket.create_connection((host, port), timeout=5.0):
            return
    except OSError as err:
        raise ClusterError(f"cannot reach WebHDFS at {host}:{port}: tried TCP connect ({err.strerror or err})") from err


SYNC_EXTRA = "pip install 'volcano-pipelines[sync]'"


def open_source(location: Location, auth: Auth) -> Source:
    """The client for a location. A missing optional package, or a URL the protocol's
    file system does not accept, is bad input (InputError, field src) saying what to do;
    a remote system that cannot be reached is a ClusterError."""
    if location.scheme == "file":
        return LocalSource(location.path)
    try:
        if location.scheme in ("hdfs", "viewfs"):
            return HdfsSource(location, auth)
        return FsspecSource(location, auth)
    except InputError:
        raise
    except ImportError as err:
        raise InputError("src", location.url, _install_hint(location.scheme, err)) from err
    except (TypeError, ValueError) as err:  # the protocol's constructor refused the URL
        raise InputError("src", location.url, f"a URL the {location.scheme} file system accepts ({short_error(err)})") from err
    except OSError as err:
        raise ClusterError(f"cannot open {location.url}: {short_error(err)}") from err


def _install_hint(scheme: str, err: ImportError) -> str:
    """What to install for a scheme whose client package is missing: the sync extra for
    the schemes this project supports, otherwise the module fsspec could not import."""
    if scheme in ("hdfs", "viewfs", "webhdfs") or err.name in ("fsspec", "hdfs_native"):
        return f"{scheme}:// needs the sync extra, which is not installed ({SYNC_EXTRA})"
    cause = err.__cause__ if isinstance(err.__cause__, ImportError) else err
    module = (cause.name or "").split(".")[0]
    if module:
        return f"{scheme}:// needs {module}, which is not installed (pip install {module})"
    return f"{scheme}:// needs a package that is not installed ({err})"
