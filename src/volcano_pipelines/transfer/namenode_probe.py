"""Is there a NameNode's RPC server at host:port? Asked in Python, with short timeouts, before
hdfs-native (Rust) gets the address: hdfs-native waits without a deadline for an answer that a
web port (the NameNode's HTTP port, the common mistake) or a silent port never gives, and the
process does not answer signals while it waits.

The probe opens a connection, sends what every Hadoop RPC client sends first (the connection
header, then a SASL NEGOTIATE; Hadoop's own client and hdfs-native do the same) and reads the
first bytes of the answer. Every Hadoop RPC server answers a NEGOTIATE at once, with or without
Kerberos (SUCCESS on a server with simple authentication, the mechanisms it offers otherwise),
and before any RPC call: no file system operation is made. A web server answers with an HTTP
status line or an HTML page; a silent port answers nothing."""

from __future__ import annotations

import socket
import struct
import time

from volcano_pipelines.errors import ClusterError

__all__ = ["ANSWER_TIMEOUT", "CONNECT_TIMEOUT", "NEGOTIATE", "check_namenodes", "probe"]

CONNECT_TIMEOUT = 5.0
# A NameNode's reader threads answer a NEGOTIATE in milliseconds, even with a full call queue
# (the handlers are not involved).
ANSWER_TIMEOUT = 5.0

# "hrpc", version 9, service class 0, auth protocol SASL (-33), then one frame: its length and
# two length-delimited protobuf messages, RpcRequestHeaderProto {rpcKind: RPC_PROTOCOL_BUFFER,
# rpcOp: RPC_FINAL_PACKET, callId: -33 (SASL), clientId: b"", retryCount: -1} and
# RpcSaslProto {state: NEGOTIATE}.
_HEADER = b"\x08\x02\x10\x00\x18\x41\x22\x00\x28\x01"
_SASL_NEGOTIATE = b"\x10\x01"
_FRAME = bytes([len(_HEADER)]) + _HEADER + bytes([len(_SASL_NEGOTIATE)]) + _SASL_NEGOTIATE
NEGOTIATE = b"hrpc\x09\x00\xdf" + struct.pack(">I", len(_FRAME)) + _FRAME
# An RPC answer frame is small (a header and a SASL message); a length above this is not one.
_MAX_FRAME = 1 << 20
_WEB_PORT_HINT = ("hdfs:// needs the NameNode's RPC port (fs.defaultFS, dfs.namenode.rpc-address; usually 8020); "
                  "a NameNode's HTTP port is for webhdfs://")


def probe(host: str, port: int, *, connect_timeout: float = CONNECT_TIMEOUT,
          answer_timeout: float = ANSWER_TIMEOUT) -> str | None:
    """None when host:port answers like a Hadoop RPC server, else why not (one phrase, without
    the address). Raises OSError when no connection can be made."""
    with socket.create_connection((host, port), timeout=connect_timeout) as sock:
        sock.sendall(NEGOTIATE)
        answer = _first_bytes(sock, answer_timeout)
    if answer is None:
        return (f"accepted the connection but did not answer the Hadoop RPC connection header in {answer_timeout:g} s "
                f"(not a NameNode RPC port?)")
    if not answer:
        return "closed the connection without answering the Hadoop RPC connection header"
    return _not_rpc(answer)


def _first_bytes(sock: socket.socket, timeout: float) -> bytes | None:
    """What the server sends within `timeout` (enough to tell an RPC frame from a web page):
    None when it sends nothing, b"" when it closes the connection first."""
    deadline = time.monotonic() + timeout
    got = b""
    while len(got) < 64:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            piece = sock.recv(64 - len(got))
        except TimeoutError:
            break
        except ConnectionResetError:
            return got
        if not piece:
            return got
        got += piece
        if len(got) >= 5 and _plausible_frame(got):
            break  # enough: the start of an RPC frame
    return got or None


def _plausible_frame(data: bytes) -> bool:
    """A 4-byte big-endian length that fits a small answer, then a length-delimited message
    that fits in it."""
    length: int = struct.unpack(">I", data[:4])[0]
    return 0 < length <= _MAX_FRAME and 0 < data[4] < length


def _not_rpc(answer: bytes) -> str | None:
    head = answer.lstrip()
    if head.startswith(b"HTTP/"):
        status = head.split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode("ascii", "replace")
        return f"answered like a web server ({status!r}), not a Hadoop RPC server: {_WEB_PORT_HINT}"
    if head[:1] == b"<" or b"<html" in head.lower():
        return f"answered with a web page, not like a Hadoop RPC server: {_WEB_PORT_HINT}"
    if len(answer) >= 5 and _plausible_frame(answer):
        return None
    return f"does not answer like a Hadoop RPC server (it sent {answer[:16]!r}): {_WEB_PORT_HINT}"


def check_namenodes(addresses: list[tuple[str, int]], *, connect_timeout: float = CONNECT_TIMEOUT,
                    answer_timeout: float = ANSWER_TIMEOUT) -> None:
    """Return when one of `addresses` answers like a NameNode's RPC server (in an HA pair the
    standby answers too); otherwise raise ClusterError naming each endpoint and what it did."""
    tried: list[str] = []
    for host, port in addresses:
        try:
            why = probe(host, port, connect_timeout=connect_timeout, answer_timeout=answer_timeout)
        except OSError as err:
            tried.append(f"{host}:{port} (TCP connect: {err.strerror or err})")
            continue
        if why is None:
            return
        tried.append(f"{host}:{port} {why}")
    if tried:
        raise ClusterError(f"cannot reach the HDFS NameNode: {'; '.join(tried)}")
