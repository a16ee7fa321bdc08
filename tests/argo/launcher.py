"""Start and stop Argo Workflows' controller next to the local control plane.

The controller runs on the host as a plain process with the test kubeconfig (cluster-wide,
like an installed controller with its ClusterRole); its step pods run on the real node
(``tests/node/``), where the ``argoexec`` image is imported. What it needs in the cluster:
Argo's CRDs with full schemas (from the Go module cache, never copied into this repository)
and its ConfigMap in its own namespace:

* ``metricsConfig`` / ``telemetryConfig`` disabled: no metrics listener;
* ``images``: the entrypoint of the project's images. A template that gives ``args`` without
  ``command`` makes the controller ask the image's registry for the entrypoint; there is no
  registry here, so the ConfigMap tells it (read from the image archives themselves).

Leader election is off (our main has none, as upstream's does with LEADER_ELECTION_DISABLE=true)
and the health check listens on a free loopback port: nothing listens beyond loopback.
"""

from __future__ import annotations

import json
import tarfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.argo import build
from tests.cluster.launcher import Process, free_port, spawn, terminate, wait_until

CONTROLLER_NAMESPACE = "argo"
CONFIGMAP = "workflow-controller-configmap"


def image_entrypoint(archive: Path) -> tuple[str, dict[str, list[str]]]:
    """(the image's name, {entrypoint, cmd}) from a docker-archive tarball (`podman save`,
    tests/node/images.py)."""
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))[0]  # type: ignore[arg-type]
        config = json.load(tar.extractfile(manifest["Config"]))["config"]  # type: ignore[arg-type]
    entry = {"entrypoint": config.get("Entrypoint") or [], "cmd": config.get("Cmd") or []}
    return manifest["RepoTags"][0], entry


def controller_config(images: Mapping[str, Mapping[str, list[str]]]) -> dict[str, Any]:
    """The controller's configuration (the ConfigMap's `config` key)."""
    return {
        "metricsConfig": {"enabled": False},
        "telemetryConfig": {"enabled": False},
        "images": {name: dict(entry) for name, entry in sorted(images.items())},
        # What docs/argo.md tells a platform engineer to set for namespaces that enforce the
        # restricted Pod Security level: Argo gives its init and wait containers no container
        # settings of their own; the templates' pod-level settings (non-root user, seccomp) cover
        # the rest. Not runAsNonRoot here: a workflow of root images elsewhere would no longer start.
        "executor": {"securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}},
    }


def image_keys(name: str) -> list[str]:
    """The spellings a template may use for one image: `podman save` names it
    `docker.io/<repo>:<tag>`, templates say `<repo>:<tag>`; the controller matches exactly."""
    short = name.removeprefix("docker.io/").removeprefix("library/")
    return sorted({name, short})


@dataclass
class ArgoController:
    state_dir: Path
    artifacts: build.ArgoArtifacts
    kubeconfig: Path
    images: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # image -> entrypoint/cmd
    namespace: str = CONTROLLER_NAMESPACE
    detach: bool = False
    log: Callable[[str], None] = print
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)
    start_seconds: float = 0.0

    @property
    def executor_image(self) -> str:
        return self.artifacts.executor_image

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def add_image(self, archive: Path) -> None:
        """Tell the controller the entrypoint of the image in ``archive`` (before start)."""
        name, entry = image_entrypoint(archive)
        for key in image_keys(name):
            self.images[key] = entry

    def start(self, timeout: float = 120.0) -> ArgoController:
        started = time.monotonic()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._install_crds()
            self._write_configmap()
            self.ports["health"] = free_port()
            self.processes["workflow-controller"] = spawn("workflow-controller", [
                str(self.artifacts.binary("workflow-controller")),
                f"-kubeconfig={self.kubeconfig}",
                f"-namespace={self.namespace}",
                f"-configmap={CONFIGMAP}",
                f"-executor-image={self.executor_image}",
                "-executor-image-pull-policy=Never",  # imported into the node, never pulled
                f"-health-address=127.0.0.1:{self.ports['health']}",
            ], self.logs_dir, self.detach)
            wait_until(self._healthy, "Argo workflow-controller /healthz", timeout, self.processes.values(),
                       self.logs_dir)
        except BaseException:
            self.log(f"Argo controller failed to start; logs in {self.logs_dir}")
            self.stop()
            raise
        self.start_seconds = round(time.monotonic() - started, 1)
        self._write_state()
        self.log(f"Argo workflow-controller {build.ARGO_VERSION} ready in {self.start_seconds}s "
                 f"(executor image {self.executor_image})")
        return self

    def stop(self) -> None:
        for process in self.processes.values():
            terminate(process)
        self.processes.clear()
        (self.state_dir / "argo-state.json").unlink(missing_ok=True)

    def __enter__(self) -> ArgoController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- steps -------------------------------------------------------------------------

    def _api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def _install_crds(self) -> None:
        from kubernetes import client

        api = client.ApiextensionsV1Api(self._api())
        names = []
        for path in sorted(build.crd_dir().glob("argoproj.io_*.yaml")):
            body = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: MBs of CRD, a fifth of the CPU
            try:
                api.create_custom_resource_definition(body)
            except client.ApiException as err:
                if err.status != 409:  # installed by an earlier start on this control plane
                    raise
            names.append(body["metadata"]["name"])

        def established() -> bool:
            for name in names:
                conditions = api.read_custom_resource_definition(name).status.conditions or []
                if not any(c.type == "Established" and c.status == "True" for c in conditions):
                    return False
            return True

        wait_until(established, "Argo CRDs established", 60, [], self.logs_dir)

    def _write_configmap(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self._api())
        try:
            core.create_namespace({"metadata": {"name": self.namespace}})
        except client.ApiException as err:
            if err.status != 409:
                raise
        body = {"metadata": {"name": CONFIGMAP},
                "data": {"config": yaml.safe_dump(controller_config(self.images), sort_keys=True)}}
        try:
            core.create_namespaced_config_map(self.namespace, body)
        except client.ApiException as err:
            if err.status != 409:
                raise
            core.replace_namespaced_config_map(CONFIGMAP, self.namespace, body)

    def _healthy(self) -> bool:
        """/healthz answers, and the controller has begun its informers and workers (its
        health check alone says OK before that)."""
        url = f"http://127.0.0.1:{self.ports['health']}/healthz"
        with urllib.request.urlopen(url, timeout=5) as resp:
            if resp.status != 200:
                return False
        log = self.processes["workflow-controller"].log_path.read_text(errors="replace")
        return "Starting Workflow Controller" in log

    # ----- state (for `down` from another process) -----------------------------------------

    def _write_state(self) -> None:
        state = {"artifacts": str(self.artifacts.directory), "kubeconfig": str(self.kubeconfig),
                 "namespace": self.namespace, "ports": self.ports,
                 "processes": {p.name: {"pid": p.pid, "args": p.args, "log": str(p.log_path)}
                               for p in self.processes.values()}}
        (self.state_dir / "argo-state.json").write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def attach(cls, state_dir: Path, log: Callable[[str], None] = print) -> ArgoController:
        state = json.loads((state_dir / "argo-state.json").read_text())
        controller = cls(state_dir=state_dir, artifacts=build.ArgoArtifacts(Path(state["artifacts"])),
                         kubeconfig=Path(state["kubeconfig"]), namespace=state["namespace"], detach=True, log=log,
                         ports=state["ports"])
        for name, info in state["processes"].items():
            controller.processes[name] = Process(name, info["args"], Path(info["log"]), None, info["pid"])
        return controller
