"""Behaviour the tests used to see only through a golden or "generated file is fresh" text diff,
or not at all (issue 33, "Bugs the tests let through"): each asserts the value itself, so
regenerating the goldens would not hide a change.

- TF_CONFIG's task index for ps / chief / evaluator with more than one parameter server (the
  container command run for real under bash, as tests/unit/volcano/test_entrypoint.py does);
- the MPI hostfile's last worker (Volcano's svc file without a final newline, distinct hosts);
- `ttl=0` reaching `ttlSecondsAfterFinished` (0 is "delete at once", not "unset");
- `--env KEY=VALUE` with '=' in the value, from the command line to the container env;
- the Argo pods' `allowPrivilegeEscalation: false` and `podGC` strategy, on the built dicts."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.entrypoint import received, run_container, tf_job
from volcano_pipelines.cli import main
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import JobOptions, MPIJobSpec, Role


@pytest.mark.parametrize(("task", "index"), [("ps", 0), ("ps", 1), ("ps", 2), ("chief", 0), ("evaluator", 0)])
def test_tf_config_names_each_task_and_its_index(file_server: tuple[str, Path], tmp_path: Path,
                                                 task: str, index: int) -> None:
    base, _ = file_server
    job = tf_job(base, ps=Role(replicas=3), chief=Role(), evaluator=Role())
    proc = run_container(job, task, tmp_path, task_index=index)
    assert proc.returncode == 0, proc.stderr.decode()
    got = received(tmp_path)
    tf_config = json.loads(got["env"]["TF_CONFIG"])
    assert tf_config["task"] == {"type": task, "index": index}
    every_ps = [f"mnist-ps-{i}.mnist:2222" for i in range(3)]
    # A parameter server's view holds itself only (its coordinator tells it the rest).
    assert tf_config["cluster"]["ps"] == ({str(index): every_ps[index]} if task == "ps" else every_ps)
    assert tf_config["cluster"]["chief"] == ["mnist-chief-0.mnist:2222"]
    assert f"--task_index={index}" in got["argv"] and f"--job_name={task}" in got["argv"]


@pytest.mark.parametrize("final_newline", [True, False], ids=["newline", "no-final-newline"])
def test_the_mpi_hostfile_keeps_every_worker_including_the_last(fake_mpiexec: Path, tmp_path: Path,
                                                                final_newline: bool) -> None:
    listener = socket.socket()
    listener.bind(("", 0))  # every loopback address: 127.0.0.2 and .3 reach it too
    listener.listen(8)
    hosts = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    hostfile = tmp_path / "mpiworker.host"
    hostfile.write_text("\n".join(hosts) + ("\n" if final_newline else ""))
    job = build_mpi_job(MPIJobSpec(job=JobOptions(name="hello"), command=("true",), worker=Role(replicas=3),
                                   slots_per_worker=2))
    try:
        proc = run_container(job, "mpimaster", tmp_path, path_prefix=str(fake_mpiexec), extra_env={
            "VPIPE_WORKER_HOSTFILE": str(hostfile), "VPIPE_SSH_PORT": str(listener.getsockname()[1]),
            "VPIPE_ENTRY": "unused"})
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    got = received(tmp_path)
    assert got["hostfile"].splitlines() == [f"{h} slots=2" for h in hosts]
    assert got["argv"][got["argv"].index("-np") + 1] == "6"


def test_the_mpi_master_reads_every_worker_task_of_a_split_role(fake_mpiexec: Path, tmp_path: Path) -> None:
    """Workers past one Volcano task's limit are several tasks (volcano/slices.py): the master's
    hostfile lists the hosts of each, in order, one line each."""
    listener = socket.socket()
    listener.bind(("", 0))
    listener.listen(8)
    files = []
    for name, hosts in (("mpiworker.host", ["127.0.0.1", "127.0.0.2"]), ("mpiworker_s1.host", ["127.0.0.3"])):
        files.append(tmp_path / name)
        files[-1].write_text("\n".join(hosts))
    job = build_mpi_job(MPIJobSpec(job=JobOptions(name="hello"), command=("true",), worker=Role(replicas=3)))
    try:
        proc = run_container(job, "mpimaster", tmp_path, path_prefix=str(fake_mpiexec), extra_env={
            "VPIPE_WORKER_HOSTFILE": " ".join(str(f) for f in files), "VPIPE_SSH_PORT": str(listener.getsockname()[1]),
            "VPIPE_ENTRY": "unused"})
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert received(tmp_path)["hostfile"].splitlines() == [f"127.0.0.{i} slots=1" for i in (1, 2, 3)]


def _rendered(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["render", *argv]) == 0
    return yaml.safe_load(capsys.readouterr().out)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("ttl", "want"), [("0", 0), ("1", 1), ("86400", 86400)])
def test_ttl_reaches_the_job_zero_included(capsys: pytest.CaptureFixture[str], ttl: str, want: int) -> None:
    job = _rendered(capsys, "tf", "--name", "j", "--ttl", ttl)
    assert job["spec"]["ttlSecondsAfterFinished"] == want
    job = _rendered(capsys, "mpi", "--name", "m", "--ttl", ttl, "--", "true")
    assert job["spec"]["ttlSecondsAfterFinished"] == want


def _env(job: dict[str, Any], task: str) -> dict[str, str]:
    container = next(t for t in job["spec"]["tasks"] if t["name"] == task)["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_env_values_keep_every_equals_sign(capsys: pytest.CaptureFixture[str]) -> None:
    job = _rendered(capsys, "tf", "--name", "j", "--env", "OPTS=--a=1 --b==2", "--env", "worker:URL=http://h/?x=1&y=",
                    "--env", "EMPTY=")
    worker, ps = _env(job, "worker"), _env(job, "ps")
    assert worker["OPTS"] == "--a=1 --b==2" and ps["OPTS"] == "--a=1 --b==2"
    assert worker["URL"] == "http://h/?x=1&y=" and "URL" not in ps
    assert worker["EMPTY"] == ""


def test_argo_pods_cannot_escalate_and_are_collected() -> None:
    from volcano_pipelines.argo import pipelines as argo_pipelines
    from volcano_pipelines.argo import templates
    from volcano_pipelines.images import RUNTIME_IMAGE

    built = [templates.step_workflow_template(spec, RUNTIME_IMAGE).to_dict() for spec in templates.STEPS.values()]
    built += [argo_pipelines.train_and_serve(RUNTIME_IMAGE).to_dict(), argo_pipelines.train_and_serve(RUNTIME_IMAGE, "mpi").to_dict()]
    containers = 0
    for workflow in built:
        spec = workflow["spec"]
        assert spec["podGC"] == {"strategy": "OnWorkflowSuccess"}
        for template in spec.get("templates", []):
            if "container" in template:
                containers += 1
                security = template["container"]["securityContext"]
                assert security["allowPrivilegeEscalation"] is False
                assert security["capabilities"]["drop"] == ["ALL"] and security["runAsNonRoot"] is True
    assert containers >= len(templates.STEPS)
