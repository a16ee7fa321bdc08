"""The images from images/, built with podman and run for real: the runtime image answers as
the package, the TF trainer runs the pod's own entry script (rendered by `render_tf`) against
an HTTP code server and the user's run.sh gets the contract's arguments and TF_CONFIG, the MPI
trainer runs an mpi4py allreduce and starts sshd, and TensorBoard serves.

Each container uses the host's network (the code server listens on loopback); the real
node's tests (tests/node) run the same images as pods."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from images import build
from tests.helpers.http_server import serve
from tests.images.fixtures import Images, hdfs_native_choice
from volcano_pipelines import __version__
from volcano_pipelines.images import IMAGES
from volcano_pipelines.localjob.plan import expand
from volcano_pipelines.localjob.ports import free_port
from volcano_pipelines.steps import render_mpi, render_tf

pytestmark = pytest.mark.containers


def _get(url: str, body: Any = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())

# The user's entry point: prints what it received as one JSON line, and the TensorFlow it can
# import (the image's, not the host's).
RUN_SH = r"""#!/bin/bash
python3 - "$@" <<'PY'
import json, os, sys
import tensorflow as tf
print("RECEIVED " + json.dumps({"argv": sys.argv[1:], "tf_config": os.environ.get("TF_CONFIG"),
      "cwd": os.getcwd(), "uid": os.getuid(), "tensorflow": tf.__version__}))
PY
"""


@pytest.fixture(scope="module")
def code_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("code")
    (root / "mnist").mkdir()
    (root / "mnist" / "run.sh").write_text(RUN_SH)
    (root / "mnist" / "model.py").write_text("LAYERS = 2\n")
    with serve(root) as server:
        yield server.base


def container_of(job: dict[str, Any], task: str) -> dict[str, Any]:
    return next(t for t in job["spec"]["tasks"] if t["name"] == task)["template"]["spec"]["containers"][0]


def kubelet_view(container: dict[str, Any], extra: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """argv and env as the kubelet would start the container: `$(VAR)` expanded in env values
    (in order), command and args."""
    defined: dict[str, str] = {}
    for entry in container["env"]:
        defined[entry["name"]] = expand(entry["value"], defined)
    defined.update(extra)
    return [expand(part, defined) for part in container["command"] + container["args"]], defined


def test_every_image_is_built_tagged_and_labelled(images: Images) -> None:
    assert set(images.built) == set(build.IMAGES) == set(IMAGES) | set(build.STAND_INS)
    for name, built in images.built.items():
        assert built.tag == build.IMAGES[name] and built.tag.endswith(f":{__version__}")
        assert images.engine.label(built.tag, build.HASH_LABEL) == built.content_hash
        assert images.archive(name).stat().st_size > 10_000_000  # a docker-archive with layers


def test_runtime_image_is_the_package_as_non_root(images: Images) -> None:
    version = images.run("runtime", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"vpipe {__version__}"
    who = images.run("runtime", "-c", "import os, kfp, kfp.kubernetes, hdfs_native, volcano_pipelines as v; "
                     "print(os.getuid(), kfp.__version__, v.__version__)", entrypoint="python3")
    assert who.returncode == 0, who.stderr
    uid, kfp_version, package = who.stdout.split()
    assert (uid, package) == ("1000", __version__)
    assert kfp_version == "2.17.3"
    # The main job's first step works inside the image: a Volcano Job rendered by the CLI.
    rendered = images.run("runtime", "render", "tf", "--name", "demo", "--workers", "2")
    assert rendered.returncode == 0, rendered.stderr
    job = yaml.safe_load(rendered.stdout)
    assert job["kind"] == "Job" and {t["name"] for t in job["spec"]["tasks"]} == {"ps", "worker"}


def test_runtime_image_reads_hdfs_with_the_hdfs_native_it_was_built_with(images: Images) -> None:
    """The patched hdfs-native (images/hdfs-native/) where the image was built with it: the copy
    pods then read hdfs:// into their buffers (`hdfs-readinto`); PyPI's wheel otherwise."""
    probe = images.run("runtime", "-c", "from importlib.metadata import version; "
                       "from volcano_pipelines.transfer.sources import hdfs_read_path; "
                       "print(version('hdfs-native'), hdfs_read_path())", entrypoint="python3")
    assert probe.returncode == 0, probe.stderr
    installed, path = probe.stdout.split()
    if hdfs_native_choice() == "patched":
        assert (installed, path) == ("0.14.7+vpipe.2", "hdfs-readinto")
    else:
        assert "+vpipe" not in installed and path == "hdfs-packets"


def test_tf_trainer_runs_the_pod_entry_script_against_a_code_server(images: Images, code_server: str,
                                                                    tmp_path: Path) -> None:
    job = render_tf(name="mnist", ps=1, workers=2, chief=True, code_url=f"{code_server}/mnist/",
                    args=["--epochs=3", "--note=$(NOT_A_VAR) 'quoted'"], image=IMAGES["trainer-tf"])
    container = container_of(job, "worker")
    assert container["image"] == IMAGES["trainer-tf"]
    argv, env = kubelet_view(container, {"VK_TASK_INDEX": "1", "VPIPE_CODE_DIR": "/tmp/code"})
    # /etc/volcano as Volcano's svc plugin mounts it: the entry point builds the cluster from it.
    svc = tmp_path / "etc-volcano"
    svc.mkdir()
    for task, replicas in (("chief", 1), ("ps", 1), ("worker", 2)):
        (svc / f"{task}.host").write_text("\n".join(f"mnist-{task}-{i}.mnist" for i in range(replicas)))
    svc.chmod(0o755)
    proc = images.run("trainer-tf", *argv[1:], entrypoint=argv[0], env=env, volumes=[f"{svc}:/etc/volcano:ro"])
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("RECEIVED "))
    got = json.loads(line.removeprefix("RECEIVED "))
    assert got["argv"] == [
        "--job_name=worker", "--task_index=1", "--ps_hosts=mnist-ps-0.mnist:2222",
        "--worker_hosts=mnist-worker-0.mnist:2222,mnist-worker-1.mnist:2222",
        "--data_dir=/data", "--log_dir=/logs", "--shard_index=1", "--num_shards=2",
        "--epochs=3", "--note=$(NOT_A_VAR) 'quoted'",
    ]
    tf_config = json.loads(got["tf_config"])
    assert tf_config["task"] == {"type": "worker", "index": 1}
    # A worker's view: the chief, every parameter server and itself.
    assert tf_config["cluster"] == {"chief": ["mnist-chief-0.mnist:2222"], "ps": ["mnist-ps-0.mnist:2222"],
                                    "worker": {"1": "mnist-worker-1.mnist:2222"}}
    assert got["cwd"] == "/tmp/code" and got["uid"] == 1000
    assert got["tensorflow"] == "2.21.0"
    assert "fetched code from" in proc.stderr


def test_mpi_trainer_allreduces_and_starts_sshd(images: Images) -> None:
    # Rank 0 gathers what every rank got from the Allreduce and prints it once (Open MPI may
    # drop a rank's last stdout line at teardown when stdout is not a terminal).
    program = ("from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; "
               "total = c.allreduce(np.array([c.rank + 1.0]), op=MPI.SUM); "
               "seen = c.gather((c.rank, float(total[0]))); c.rank == 0 and print('GATHERED', sorted(seen))")
    proc = images.run("trainer-mpi", "mpiexec", "--allow-run-as-root", "--oversubscribe", "-np", "3",
                      "python3", "-c", program)
    assert proc.returncode == 0, proc.stderr
    assert "GATHERED [(0, 6.0), (1, 6.0), (2, 6.0)]" in proc.stdout.splitlines(), proc.stdout
    # The worker's side: the image's sshd wrapper makes host keys and its config is valid.
    job = render_mpi(name="allreduce", command=["python3", "/app/allreduce.py"], workers=2, image=IMAGES["trainer-mpi"])
    assert container_of(job, "mpiworker")["image"] == IMAGES["trainer-mpi"]
    check = images.run("trainer-mpi", "-c", '"$VPIPE_SSHD" -t && ls /etc/ssh/ssh_host_ed25519_key', entrypoint="bash")
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "/etc/ssh/ssh_host_ed25519_key"


def _tensorboard_environment(images: Images, logs: Path, wait: float) -> tuple[Any, str]:
    """TensorBoard started in its image on a free port: its /data/environment answer, or None
    and what it printed, with a traceback of every thread (faulthandler, on SIGABRT), when it
    did not answer within `wait` seconds."""
    port = free_port()
    started = images.run("tensorboard", "--logdir", "/logs", "--host", "127.0.0.1", "--port", str(port),
                         volumes=[f"{logs}:/logs:ro"], env={"PYTHONFAULTHANDLER": "1"}, detach=True)
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/environment", timeout=5) as response:
                    return json.loads(response.read()), ""
            except OSError:
                if time.monotonic() > deadline:
                    images.engine("kill", "--signal", "ABRT", container, capture=True, check=False)
                    time.sleep(2)
                    out = images.engine("logs", container, capture=True, check=False)
                    return None, f"port {port}, {wait:.0f} s: {out.stdout}{out.stderr}"
                time.sleep(1)
    finally:
        images.engine("rm", "-f", container, capture=True, check=False)


def test_tensorboard_serves_the_logs(images: Images, tmp_path: Path) -> None:
    """It answers in about 2 s, loaded or not; once in CI (a cold run, four pytest processes) it
    printed its first line and then nothing for 120 s, port closed, and it never recurred alone
    or beside busy loops. A second start after such a stall is allowed and the stalled one's
    threads are shown (a warning); two stalls fail."""
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o777)
    environment, stalled = _tensorboard_environment(images, logs, wait=60)
    if environment is None:
        warnings.warn(f"TensorBoard did not answer, started again: {stalled}", stacklevel=1)
        environment, again = _tensorboard_environment(images, logs, wait=120)
        assert environment is not None, f"TensorBoard did not answer twice: {stalled}\n---\n{again}"
    assert environment["data_location"] == "/logs"
    assert environment["version"] == "2.21.0"


def test_tfserving_standin_reports_the_version_directories_and_predicts(images: Images, tmp_path: Path) -> None:
    """The stand-in (test-only) started with the flags `vpipe serve` gives TF Serving: a model
    status that follows the numbered directories under the base path (latest policy), 404
    before any version and for an unknown model, :predict with TF Serving's request checks."""
    port = free_port()
    base = tmp_path / "export" / "m"
    base.mkdir(parents=True)
    for path in (tmp_path, base.parent, base):
        path.chmod(0o755)  # the stand-in runs as uid 1000
    started = images.run("tfserving-standin", "--port=8500", f"--rest_api_port={port}", "--model_name=m",
                         "--model_base_path=/models/export/m", "--file_system_poll_wait_seconds=0.2",
                         volumes=[f"{tmp_path}:/models:ro"], detach=True)
    assert started.returncode == 0, started.stderr
    container = started.stdout.strip()
    status = f"http://127.0.0.1:{port}/v1/models/m"

    def answer(url: str, want: int, body: Any = None) -> Any:
        deadline = time.monotonic() + 60
        while True:
            try:
                code, got = _get(url, body)
                if code == want:
                    return got
            except OSError:
                pass
            if time.monotonic() > deadline:
                out = images.engine("logs", container, capture=True, check=False)
                pytest.fail(f"no HTTP {want} from {url}: {out.stdout}{out.stderr}")
            time.sleep(0.2)

    try:
        assert "Could not find any versions of model m" in answer(status, 404)["error"]
        (base / "1").mkdir()
        (base / "1" / "saved_model.pb").write_bytes(b"\x08\x01")
        assert answer(status, 200) == {"model_version_status": [
            {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}
        (base / "2").mkdir()  # no SavedModel in it: the latest version fails to load, 1 stays
        ended = answer(status + "/versions/2", 200)["model_version_status"][0]
        assert (ended["state"], ended["status"]["error_code"]) == ("END", "NOT_FOUND")
        assert answer(status + "/versions/1", 200)["model_version_status"][0]["state"] == "AVAILABLE"
        (base / "3").mkdir()
        (base / "3" / "saved_model.pbtxt").write_text("")
        answer(status + "/versions/3", 200)
        states = {v["version"]: v["state"] for v in answer(status, 200)["model_version_status"]}
        assert states["3"] == "AVAILABLE" and states["1"] == "END", states  # latest: 1 unloaded
        assert _get(f"{status}:predict", {"instances": [[1.0], [2.0]]}) == (200, {"predictions": [[0.0], [0.0]]})
        assert _get(f"{status}:predict", {"rows": []})[0] == 400
        assert _get(f"http://127.0.0.1:{port}/v1/models/other", None)[0] == 404
    finally:
        images.engine("rm", "-f", container, capture=True, check=False)
