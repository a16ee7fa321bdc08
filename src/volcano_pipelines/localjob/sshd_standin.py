"""Stands in for an MPI worker pod's sshd when the job runs on this machine (run as a script
by the local backend, standard library only).

On a cluster, mpiexec on the master reaches each worker pod over ssh (Volcano's ssh plugin
sets up the keys) and the worker pod's only process is sshd. Here every "pod" is this
machine: mpiexec starts all ranks locally without ssh, so a worker only has to be a running
pod that answers on the ssh port the master waits for. Every worker listens on the same
address and port (SO_REUSEPORT), as the master checks one port for all of them.
"""

from __future__ import annotations

import argparse
import socket
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    server.bind((args.address, args.port))
    server.listen(16)
    print(f"vpipe-local: standing in for sshd on {args.address}:{args.port} "
          "(mpiexec starts every rank on this machine without ssh)", flush=True)
    while True:
        conn, _ = server.accept()
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
