"""A TCP forwarder from the test bridge's gateway address to the API server on loopback.

Pods on the real node reach the API server the way they do on a cluster: at the
``kubernetes`` Service's ClusterIP and port (``KUBERNETES_SERVICE_HOST/PORT``, set by the
kubelet). There is no kube-proxy here: the node's nftables table DNATs that address, for
packets that come in on its own bridge only, to this forwarder on the gateway address, and
the forwarder copies bytes to and from the API server's loopback port. TLS is end to end
(the API server's certificate names the ClusterIP); the forwarder sees only ciphertext.

Run as its own process (``python apiforward.py LISTEN_HOST:PORT TARGET_HOST:PORT``) so a
node started by ``python -m tests.cluster up --real-node`` keeps it after the command exits.
Standard library only: it runs from this file, without the project on ``sys.path``.
"""

from __future__ import annotations

import asyncio
import signal
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()  # half-close: the other direction may still be talking
        except (ConnectionError, OSError):
            pass


async def _serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, upstream_writer), _pipe(upstream_reader, client_writer))
        for writer in (client_writer, upstream_writer):
            writer.close()

    server = await asyncio.start_server(handle, *listen, reuse_address=True)
    print(f"apiforward: {listen[0]}:{listen[1]} -> {target[0]}:{target[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: apiforward.py LISTEN_HOST:PORT TARGET_HOST:PORT", file=sys.stderr)
        return 2
    asyncio.run(_serve(_address(argv[0]), _address(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
