"""Command line for the local control plane.

    python -m tests.cluster build [--force] [--real-node] [--argo]
                                                build or reuse the pinned binaries
    python -m tests.cluster up [--nodes N] [--real-node [--argo] [--no-images]] [--state-dir DIR]
                                                start everything, print the kubeconfig path
                                                (--real-node: also a kubelet + containerd
                                                node, tests/node/, with the project's images
                                                imported, built first if needed; --argo: also
                                                Argo's workflow-controller, tests/argo/)
    python -m tests.cluster status [--state-dir DIR]
    python -m tests.cluster down [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from tests.argo import build as argo_build
from tests.argo.launcher import ArgoController
from tests.cluster import build
from tests.cluster.launcher import ControlPlane, NodeShape
from tests.node import build as node_build
from tests.node.launcher import RealNode


def default_state_dir() -> Path:
    return build.cache_root() / "cluster"


def _log(message: str) -> None:
    # Progress goes to stderr so that stdout carries only the kubeconfig path.
    print(message, file=sys.stderr, flush=True)


def _stop_real_node(state_dir: Path) -> None:
    if (state_dir / "argo" / "argo-state.json").exists():
        ArgoController.attach(state_dir / "argo", log=_log).stop()
    if (state_dir / "node" / "state.json").exists():
        RealNode.attach(state_dir / "node", log=_log).stop()


def _project_images(node: RealNode, argo: ArgoController | None) -> None:
    """The images of images/ (built with podman when missing or stale, tests/images/) into
    the node, so any workflow or `vpipe` step can run by hand on the printed cluster."""
    from tests.images.fixtures import build_all, missing_tools

    missing = missing_tools()
    if missing:
        _log(f"not importing the project's images: {', '.join(missing)} missing (--no-images to silence)")
        return
    for _name, built in sorted(build_all(log=_log).items()):
        assert built.archive is not None
        node.import_image(built.archive)
        if argo is not None:
            argo.add_image(built.archive)
        _log(f"imported {built.tag} into {node.name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster")
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="build or reuse the control-plane binaries")
    p_build.add_argument("--force", action="store_true")
    p_build.add_argument("--real-node", action="store_true", help="also the real node's binaries and images")
    p_build.add_argument("--argo", action="store_true", help="also Argo's workflow-controller, argoexec and its image")
    sub.add_parser("bin-dir", help="print the binary directory for the current pins")
    p_up = sub.add_parser("up", help="start the control plane in the background")
    p_up.add_argument("--nodes", type=int, default=NodeShape.count)
    p_up.add_argument("--node-cpu", default=NodeShape.cpu)
    p_up.add_argument("--node-memory", default=NodeShape.memory)
    p_up.add_argument("--node-gpus", type=int, default=NodeShape.gpus)
    p_up.add_argument("--real-node", action="store_true",
                      help="also start a real node (kubelet, containerd, CNI bridge, CoreDNS; needs root)")
    p_up.add_argument("--argo", action="store_true",
                      help="with --real-node: also Argo's workflow-controller (step pods run on the real node)")
    p_up.add_argument("--no-images", action="store_true",
                      help="with --real-node: do not build or import the project's images")
    for p in (p_up, sub.add_parser("down", help="stop it"), sub.add_parser("status", help="show it")):
        p.add_argument("--state-dir", type=Path, default=default_state_dir())
    args = parser.parse_args(argv)

    if args.command == "build":
        build.build(force=args.force, log=_log)
        if args.real_node:
            node_build.build(force=args.force, log=_log)
        if args.argo:
            argo_build.build(force=args.force, log=_log)
        return 0
    if args.command == "bin-dir":
        print(build.bin_dir())
        return 0
    state_dir: Path = args.state_dir.resolve()
    if args.command == "up":
        if args.argo and not args.real_node:
            parser.error("--argo needs --real-node (step pods run on the real node)")
        if (state_dir / "state.json").exists() and any(
            p.alive() for p in ControlPlane.attach(state_dir).processes.values()
        ):
            _log(f"already running (state in {state_dir}); run `down` first")
            print(state_dir / "kubeconfig")
            return 1
        _stop_real_node(state_dir)  # a node left by a crashed run: unmount before rmtree
        if state_dir.exists():
            shutil.rmtree(state_dir)  # fresh etcd data and certificates each time
        bin_dir = build.build(log=_log)
        artifacts = node_build.build(log=_log) if args.real_node else None
        argo_artifacts = argo_build.build(log=_log) if args.argo else None
        shape = NodeShape(count=args.nodes, cpu=args.node_cpu, memory=args.node_memory, gpus=args.node_gpus)
        plane = ControlPlane(state_dir=state_dir, bin_dir=bin_dir, nodes=shape, detach=True, log=_log)
        plane.start()
        if artifacts is not None:
            node_dir = state_dir / "node"
            node_dir.mkdir()
            node = RealNode(state_dir=node_dir, artifacts=artifacts, server=plane.server, ca_dir=plane.pki_dir,
                            admin_kubeconfig=plane.kubeconfig, detach=True, log=_log)
            argo = None
            if argo_artifacts is not None:
                (state_dir / "argo").mkdir()
                argo = ArgoController(state_dir=state_dir / "argo", artifacts=argo_artifacts,
                                      kubeconfig=plane.kubeconfig, detach=True, log=_log)
            try:
                node.start()
                if argo is not None:
                    node.import_image(argo.artifacts.executor_archive)
                if not args.no_images:
                    _project_images(node, argo)
                if argo is not None:
                    argo.start()
            except BaseException:
                node.stop()
                plane.stop()
                raise
            _log(f"real node {node.name}: label/taint {node.label}={node.label_value}, "
                 f"gateway {node.gateway_ip}, busybox image {node.busybox_image}; pods reach the API server "
                 f"at the kubernetes Service (via {node.gateway_ip}:{node.ports['apiforward']})")
            if argo is not None:
                _log(f"Argo {argo_build.ARGO_VERSION}: workflow-controller (namespace {argo.namespace}), executor "
                     f"image {argo.executor_image}; step pods need the node's nodeSelector and toleration")
        _log(f"export KUBECONFIG={plane.kubeconfig}   # stop with: python -m tests.cluster down")
        print(plane.kubeconfig)
        return 0
    if not (state_dir / "state.json").exists():
        _log(f"not running (no {state_dir / 'state.json'})")
        return 0 if args.command == "down" else 1
    plane = ControlPlane.attach(state_dir)
    if args.command == "status":
        processes = list(plane.processes.values())
        if (state_dir / "node" / "state.json").exists():
            processes += RealNode.attach(state_dir / "node", log=_log).processes.values()
        if (state_dir / "argo" / "argo-state.json").exists():
            processes += ArgoController.attach(state_dir / "argo", log=_log).processes.values()
        for process in processes:
            print(f"{process.name:24} pid {process.pid:<8} {'running' if process.alive() else 'DEAD'}")
        print(f"kubeconfig: {plane.kubeconfig}")
        return 0 if all(p.alive() for p in processes) else 1
    _stop_real_node(state_dir)  # first: the controller, then the node drains its pods through the API server
    plane.stop()
    _log("stopped")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
