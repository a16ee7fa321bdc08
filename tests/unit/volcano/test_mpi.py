"""The MPI builder."""

from __future__ import annotations

from typing import Any

from volcano_pipelines.localjob.plan import expand
from volcano_pipelines.volcano.mpi import build_mpi_job
from volcano_pipelines.volcano.spec import CodeSource, JobOptions, MPIJobSpec, Role, Storage


def spec(**overrides: Any) -> MPIJobSpec:
    base: dict[str, Any] = {"job": JobOptions(name="hello", run_id="r1"), "command": ("python3", "hello.py", "--n", "5")}
    base.update(overrides)
    return MPIJobSpec(**base)


def tasks(job: dict) -> dict[str, dict]:
    return {t["name"]: t for t in job["spec"]["tasks"]}


def env(job: dict, task: str) -> dict[str, str]:
    return {e["name"]: e["value"] for e in tasks(job)[task]["template"]["spec"]["containers"][0]["env"]}


def test_job_shape() -> None:
    job = build_mpi_job(spec(worker=Role(replicas=3)))
    s = job["spec"]
    assert s["schedulerName"] == "volcano"
    assert s["plugins"] == {"ssh": [], "svc": [], "env": []}
    assert s["minAvailable"] == 4
    t = tasks(job)
    assert list(t) == ["mpimaster", "mpiworker"]
    assert t["mpimaster"]["replicas"] == 1 and t["mpiworker"]["replicas"] == 3
    assert t["mpimaster"]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in t["mpiworker"]
    assert (t["mpimaster"]["minAvailable"], t["mpiworker"]["minAvailable"]) == (1, 3)


def test_elastic_mpi_gang_keeps_master() -> None:
    job = build_mpi_job(spec(job=JobOptions(name="hello", min_available=3), worker=Role(replicas=4)))
    t = tasks(job)
    assert job["spec"]["minAvailable"] == 3
    assert (t["mpimaster"]["minAvailable"], t["mpiworker"]["minAvailable"]) == (1, 2)


def test_master_runs_mpiexec_over_hostfile_with_slots() -> None:
    job = build_mpi_job(spec(worker=Role(replicas=2), slots_per_worker=4, mpiexec_args=("-x", "NCCL_DEBUG")))
    master = tasks(job)["mpimaster"]["template"]["spec"]["containers"][0]
    assert master["args"] == ["-x", "NCCL_DEBUG", "python3", "hello.py", "--n", "5"]
    e = env(job, "mpimaster")
    assert e["VPIPE_MPIEXEC_NARGS"] == "2"
    assert e["VPIPE_SLOTS_PER_WORKER"] == "4" and e["VPIPE_NUM_WORKERS"] == "2"
    assert e["VPIPE_WORKER_HOSTFILE"] == "/etc/volcano/mpiworker.host"
    script = e["VPIPE_ENTRY_SCRIPT"]
    assert "mpiexec" in script and "--hostfile" in script and "slots=" in script


def test_workers_run_sshd_in_foreground() -> None:
    worker = tasks(build_mpi_job(spec()))["mpiworker"]["template"]["spec"]["containers"][0]
    # What bash receives once the kubelet has expanded $(VAR) and turned $$ into $.
    script = next(item["value"] for item in worker["env"] if item["name"] == "VPIPE_ENTRY_SCRIPT")
    assert 'exec "${VPIPE_SSHD:-/usr/sbin/sshd}" -D -e' in expand(script, {})
    assert worker["args"] == []
    assert worker["ports"] == [{"name": "ssh", "containerPort": 22, "protocol": "TCP"}]


def test_master_smaller_by_default_and_image_override() -> None:
    job = build_mpi_job(spec(job=JobOptions(name="hello", image="mpi:1"), worker=Role(image="mpi-gpu:1")))
    master = tasks(job)["mpimaster"]["template"]["spec"]["containers"][0]
    worker = tasks(job)["mpiworker"]["template"]["spec"]["containers"][0]
    assert master["image"] == "mpi:1" and worker["image"] == "mpi-gpu:1"
    assert master["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}


def test_code_and_storage_on_both_tasks() -> None:
    job = build_mpi_job(spec(code=CodeSource(url="http://f/code/"), storage=Storage(data_pvc="d", log_pvc="l")))
    for task in ("mpimaster", "mpiworker"):
        pod = tasks(job)[task]["template"]["spec"]
        assert {v["name"] for v in pod["volumes"]} == {"vpipe-code", "vpipe-data", "vpipe-logs"}
        assert env(job, task)["VPIPE_CODE_URL"] == "http://f/code/"
