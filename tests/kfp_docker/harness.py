"""KFP components in real containers: kfp.local's DockerRunner against podman's
Docker-compatible API.

`podman system service` listens on a socket of the test's own (runc, explicit ulimits: this
machine's cgroup hybrid breaks crun, and podman's default ulimits ask for more than the hard
limit). kfp.local then starts every component of a pipeline as a container of the image the
component names — the project's runtime image — exactly as written in the compiled
component: command, arguments, executor input.

One part of kfp.local is replaced, and only that: how a container is run. kfp 2.17 creates it
with `auto_remove=True` and reads the exit status afterwards; by then podman has removed the
container and answers 404, which kfp.local takes for exit 0, so a failing component is
reported as a success (kubeflow/pipelines#13332). `run_container` here waits for the exit
status itself and removes the container afterwards. It also sets the entrypoint to the
command's first word, since an image's ENTRYPOINT (the runtime image's is `vpipe`) is not
cleared by an empty one — KFP's own backend runs `command` as the container's entrypoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
"""


def podman_missing() -> list[str]:
    """What this machine lacks to run the Docker-compatible service (empty when nothing)."""
    missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None]
    try:
        import docker  # noqa: F401 - kfp.local's DockerRunner needs the `docker` package
    except ImportError:
        missing.append("the docker Python package (pip install docker)")
    return missing


@contextmanager
def podman_service(state_dir: Path, timeout: float = 60.0) -> Iterator[str]:
    """A podman API service on a socket under state_dir; yields its DOCKER_HOST URL. It sees
    the images podman built on this machine (the default image store)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    conf = state_dir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    socket_path = state_dir / "podman.sock"
    log = (state_dir / "podman-service.log").open("w")
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{socket_path}"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"unix://{socket_path}"
    try:
        _wait_for_ping(url, proc, timeout)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_for_ping(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    import docker

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"podman system service exited with {proc.returncode}")
        try:
            client = docker.DockerClient(base_url=url, timeout=10)
            try:
                if client.ping():
                    return
            finally:
                client.close()
        except Exception:  # noqa: BLE001 - not listening yet
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"podman system service did not answer on {url} within {timeout:.0f} s")
        time.sleep(0.3)


def find_image(client: Any, image: str) -> str:
    """The local image a component names. podman stores `volcano-pipelines/runtime:0.1.0` as
    `docker.io/...` or `localhost/...`; nothing can be pulled here, so a missing image is an
    error that says which."""
    wanted = {image, f"docker.io/{image}", f"localhost/{image}"}
    for found in client.images.list():
        for tag in found.tags:
            if tag in wanted:
                return str(tag)
    raise RuntimeError(f"image {image!r} is not in podman's image store (images/build.py builds it); "
                       "nothing can be pulled on this machine")


# Per-container settings the test gives kfp.local (DockerRunner passes the same keys through).
RunSettings = Mapping[str, Any]


def container_runner(settings: Callable[[], RunSettings],
                     record: Callable[[int], None] = lambda code: None) -> Callable[..., int]:
    """A replacement for kfp.local.docker_task_handler.run_docker_container that reports a
    container's real exit status (also to `record`) and removes the container itself."""

    def run_container(client: Any, image: str, command: Sequence[str], volumes: Mapping[str, Any],
                      **container_run_args: Any) -> int:
        extra = dict(settings())
        mounts = list(extra.pop("mounts", []))
        environment = {**extra.pop("environment", {}), **(container_run_args.pop("environment", None) or {})}
        container = client.containers.create(
            image=find_image(client, image), entrypoint=[command[0]], command=list(command[1:]),
            volumes=dict(volumes), mounts=mounts, environment=environment, detach=True,
            **{**container_run_args, **extra},
        )
        try:
            container.start()
            for line in container.logs(stream=True, follow=True):
                print(line.decode(errors="replace"), end="")
            code = int(container.wait()["StatusCode"])
            record(code)
            return code
        finally:
            container.remove(force=True)

    return run_container


def bind(source: Path, target: str, read_only: bool = False) -> Any:
    """A bind mount for `KfpDocker.mounts`."""
    from docker.types import Mount

    return Mount(target=target, source=str(source), type="bind", read_only=read_only)


def readable_kubeconfig(cluster: Any, tmp_path: Path) -> Path:
    """The test kubeconfig with its certificate files embedded (the container sees only this
    file), readable by the runtime image's uid 1000 — as a kubeconfig mounted from a Secret."""
    import base64

    import yaml

    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    for section, keys in (("clusters", ("certificate-authority",)), ("users", ("client-certificate", "client-key"))):
        for entry in config.get(section) or []:
            body = entry.get(section[:-1]) or {}
            for key in keys:
                if key in body:
                    body[f"{key}-data"] = base64.b64encode(Path(body.pop(key)).read_bytes()).decode()
    copy = tmp_path / "kubeconfig" / "config"
    copy.parent.mkdir(mode=0o755)
    copy.write_text(yaml.safe_dump(config))
    copy.chmod(0o644)
    return copy


def task_dirs(root: Path, task: str) -> list[Path]:
    """The output directories kfp.local made for `task` under the pipeline root, oldest first
    (their parent's name ends with the run's timestamp)."""
    return sorted(root.glob(f"*/{task}"))


def task_outputs(root: Path, task: str) -> dict[str, Any]:
    """The parameter outputs of the one run of `task` under the pipeline root."""
    found = task_dirs(root, task)
    assert len(found) == 1, f"expected one output directory of task {task}, found {found}"
    return outputs_in(found[0])


def outputs_in(task_dir: Path) -> dict[str, Any]:
    """The parameter outputs in one task output directory (KFP's executor_output.json)."""
    data = json.loads((task_dir / "executor_output.json").read_text())
    return dict(data.get("parameterValues") or {})
