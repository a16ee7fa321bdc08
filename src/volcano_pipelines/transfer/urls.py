"""Pure parsing of source / destination locations and of Hadoop client configuration."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from volcano_pipelines.errors import InputError

SOURCE_SCHEMES = ("hdfs", "viewfs", "webhdfs", "file")
# What an error about a source URL says is possible.
SCHEMES_TEXT = (
    "an hdfs://, viewfs://, webhdfs:// or file:// URL, or a local path "
    "(other fsspec protocols, best effort, when their package is installed)"
)
DEFAULT_RPC_PORT = 8020
DEFAULT_WEBHDFS_PORT = 9870


@dataclass(frozen=True)
class Location:
    scheme: str  # hdfs | viewfs | webhdfs | file | another fsspec protocol
    authority: str  # "host:port", a name service, or "" (default file system / local)
    path: str  # absolute, no trailing slash except "/"

    @property
    def url(self) -> str:
        if self.scheme == "file":
            return f"file://{self.path}"
        return f"{self.scheme}://{self.authority}{self.path}"


def parse_source(url: str) -> Location:
    if not url or "\x00" in url:
        raise InputError("src", url, SCHEMES_TEXT)
    if "://" not in url:
        if not url.startswith("/"):
            url = os.path.abspath(url)
        return Location("file", "", _norm(url))
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - validates the port (a number from 0 to 65535) here, once
    except ValueError as err:
        raise InputError("src", url, f"a well-formed URL ({err}): {SCHEMES_TEXT}") from err
    scheme = parts.scheme.lower()
    if scheme not in SOURCE_SCHEMES and not _fsspec_knows(scheme):
        raise InputError("src", url, SCHEMES_TEXT)
    if parts.query or parts.fragment:
        raise InputError("src", url, "a URL without ?query or #fragment")
    path = unquote(parts.path) or "/"
    if ".." in path.split("/"):
        raise InputError("src", url, "a path without '..' components")
    if scheme == "file" and parts.netloc not in ("", "localhost"):
        raise InputError("src", url, "file:///absolute/path (no host)")
    return Location(scheme, parts.netloc, _norm(path))


def parse_dest(path: str) -> str:
    """The destination is a mounted directory (the PVC): a path or file:// URL."""
    if not path or "\x00" in path:
        raise InputError("dst", path, "a local directory path (the mounted volume)")
    if "://" in path:
        try:
            parts = urlsplit(path)
        except ValueError as err:
            raise InputError("dst", path, f"a local directory path or file:///path ({err})") from err
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            raise InputError("dst", path, "a local directory path or file:///path (the mounted volume)")
        path = unquote(parts.path)
    root = _norm(os.path.abspath(path))
    # A file on the way (DST=afile/sub) is the same mistake as DST=afile: bad input, found now
    # rather than as a failed mkdir (exit 1) after the source was listed.
    above = root
    while above != "/":
        above = os.path.dirname(above)
        if os.path.lexists(above) and not os.path.isdir(above):
            raise InputError("dst", path if "://" not in path else path, f"a directory path ({above} is a file)")
    return root


def _norm(path: str) -> str:
    path = "/" + "/".join(p for p in path.split("/") if p and p != ".")
    return path


def _fsspec_knows(scheme: str) -> bool:
    """fsspec has an implementation for the scheme: a known one (maybe not installed:
    opening it then says what to install) or one registered at run time."""
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        return False
    return scheme in known_implementations or scheme in registry


# ---------------------------------------------------------------------------- Hadoop conf


def read_hadoop_xml(text: str) -> dict[str, str]:
    """<configuration><property><name/><value/></property>...</configuration> as a dict."""
    out: dict[str, str] = {}
    import xml.etree.ElementTree as ET  # only when a Hadoop configuration is read

    root = ET.fromstring(text)
    for prop in root.iter("property"):
        name = prop.findtext("name")
        value = prop.findtext("value")
        if name is not None and value is not None:
            out[name.strip()] = value.strip()
    return out


def load_hadoop_conf(conf_dir: str | None) -> dict[str, str]:
    """core-site.xml + hdfs-site.xml from `conf_dir` (or $HADOOP_CONF_DIR); {} if none."""
    conf_dir = conf_dir or os.environ.get("HADOOP_CONF_DIR")
    out: dict[str, str] = {}
    if not conf_dir:
        return out
    for name in ("core-site.xml", "hdfs-site.xml"):
        path = os.path.join(conf_dir, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                out.update(read_hadoop_xml(fh.read()))
    return out


def namenode_rpc_addresses(location: Location, conf: dict[str, str]) -> list[tuple[str, int]]:
    """The NameNode RPC endpoints a client would try for an hdfs:// location: the
    explicit host:port, every NameNode of an HA name service, or fs.defaultFS's."""
    authority = location.authority
    if not authority:
        default = conf.get("fs.defaultFS", "")
        if default.startswith("hdfs://"):
            authority = urlsplit(default).netloc
    if not authority:
        return []
    host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    if port:
        return [(host, int(port))]
    namenodes = conf.get(f"dfs.ha.namenodes.{authority}")
    if namenodes:
        out = []
        for nn in namenodes.split(","):
            addr = conf.get(f"dfs.namenode.rpc-address.{authority}.{nn.strip()}")
            if addr:
                h, _, p = addr.rpartition(":")
                out.append((h, int(p)))
        return out
    return [(authority, DEFAULT_RPC_PORT)]
