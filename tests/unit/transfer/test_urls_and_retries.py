"""Location parsing, Hadoop configuration, NameNode endpoints, retry policy."""

from __future__ import annotations

import socket

import pytest

from volcano_pipelines.errors import ClusterError, InputError
from volcano_pipelines.transfer.namenode_probe import check_namenodes
from volcano_pipelines.transfer.retries import is_transient, short_error, with_retries
from volcano_pipelines.transfer.urls import (
    Location,
    namenode_rpc_addresses,
    parse_dest,
    parse_source,
    read_hadoop_xml,
)


def test_parse_source() -> None:
    assert parse_source("hdfs://nn:8020/data/x/") == Location("hdfs", "nn:8020", "/data/x")
    assert parse_source("hdfs://ns1/data") == Location("hdfs", "ns1", "/data")
    assert parse_source("viewfs://cluster/a") == Location("viewfs", "cluster", "/a")
    assert parse_source("webhdfs://h:9870/a%20b") == Location("webhdfs", "h:9870", "/a b")
    assert parse_source("file:///tmp/x") == Location("file", "", "/tmp/x")
    assert parse_source("/tmp/x/./y").path == "/tmp/x/y"


@pytest.mark.parametrize("bad", ["", "gopherz://x/y", "hdfs://nn/a/../b", "hdfs://nn/a?x=1", "file://host/x"])
def test_parse_source_rejects(bad: str) -> None:
    with pytest.raises(InputError) as info:
        parse_source(bad)
    assert info.value.field == "src"


def test_parse_dest() -> None:
    assert parse_dest("/mnt/data/") == "/mnt/data"
    assert parse_dest("file:///mnt/data") == "/mnt/data"
    for bad in ("", "hdfs://nn/x", "s3://b/k"):
        with pytest.raises(InputError):
            parse_dest(bad)


HDFS_SITE = """<?xml version="1.0"?>
<configuration>
  <property><name>dfs.nameservices</name><value>ns1</value></property>
  <property><name>dfs.ha.namenodes.ns1</name><value>nn1, nn2</value></property>
  <property><name>dfs.namenode.rpc-address.ns1.nn1</name><value>a.example:8020</value></property>
  <property><name>dfs.namenode.rpc-address.ns1.nn2</name><value>b.example:8020</value></property>
  <property><name>fs.defaultFS</name><value>hdfs://ns1</value></property>
</configuration>"""


def test_namenode_addresses_from_ha_config() -> None:
    conf = read_hadoop_xml(HDFS_SITE)
    assert namenode_rpc_addresses(Location("hdfs", "ns1", "/x"), conf) == [("a.example", 8020), ("b.example", 8020)]
    assert namenode_rpc_addresses(Location("hdfs", "", "/x"), conf) == [("a.example", 8020), ("b.example", 8020)]
    assert namenode_rpc_addresses(Location("hdfs", "nn:9000", "/x"), conf) == [("nn", 9000)]
    assert namenode_rpc_addresses(Location("hdfs", "plainhost", "/x"), {}) == [("plainhost", 8020)]


def test_unreachable_namenode_names_every_endpoint() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ClusterError) as info:
        check_namenodes([("127.0.0.1", port), ("127.0.0.1", port)], connect_timeout=1)
    assert str(info.value).count(f"127.0.0.1:{port}") == 2


def test_retries_transient_errors_with_backoff() -> None:
    calls: list[int] = []
    sleeps: list[float] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionResetError("reset")
        return "ok"

    assert with_retries("x", flaky, sleep=sleeps.append) == "ok"
    assert len(calls) == 3 and len(sleeps) == 2 and sleeps[1] > sleeps[0] * 0.9


def test_no_retry_for_missing_files() -> None:
    calls: list[int] = []

    def missing() -> None:
        calls.append(1)
        raise FileNotFoundError("/x")

    with pytest.raises(FileNotFoundError):
        with_retries("x", missing, sleep=lambda s: None)
    assert calls == [1]


def test_transient_classification_of_namenode_errors() -> None:
    safe_mode = RuntimeError('RPCError("org.apache.hadoop.hdfs.server.namenode.SafeModeException", "Name node is in safe mode.\\n\\tat x")')
    assert is_transient(safe_mode)
    assert not is_transient(RuntimeError('RPCError("org.apache.hadoop.security.AccessControlException", "no")'))
    assert is_transient(RuntimeError('DataTransferError("All DataNodes failed: [...]")'))
    assert "\n" not in short_error(safe_mode) and "\\tat" not in short_error(safe_mode)
