"""MPI (one `mpimaster` running mpiexec over N `mpiworker` sshd pods) as a Volcano Job."""

from __future__ import annotations

from typing import Any

from volcano_pipelines.labels import TRAIN_STEP
from volcano_pipelines.volcano.common import (
    code_env,
    task_min_available,
    job_envelope,
    pod_template,
    storage_env,
    task,
    volumes_and_mounts,
)
from volcano_pipelines.volcano.entrypoint import ENTRY_COMMAND, MPI_MASTER_SCRIPT, MPI_WORKER_SCRIPT, entry_script_env
from volcano_pipelines.volcano.slices import TASK_OFFSET_ENV, plan_slices, split_min_available, svc_host_file
from volcano_pipelines.volcano.spec import DEFAULT_MPI_IMAGE, MPIJobSpec
from volcano_pipelines.objects.validate import check_manifest_size
from volcano_pipelines.volcano.validate import validate_mpi

__all__ = ["MASTER", "STEP", "WORKER", "WORKER_HOSTFILE", "build_mpi_job"]

STEP = TRAIN_STEP
MASTER = "mpimaster"
WORKER = "mpiworker"
# Written by Volcano's svc plugin: one line per pod of the task, `<job>-mpiworker-<i>.<job>`.
WORKER_HOSTFILE = svc_host_file(WORKER)


def build_mpi_job(spec: MPIJobSpec) -> dict[str, Any]:
    validate_mpi(spec)
    # Workers past one task's svc limit are several tasks of one template (volcano/slices.py).
    slices = plan_slices(spec.job.name, WORKER, spec.worker.replicas)
    shared_env = [
        {"name": "VPIPE_JOB_NAME", "value": spec.job.name},
        {"name": "VPIPE_NUM_WORKERS", "value": str(spec.worker.replicas)},
        {"name": "VPIPE_SLOTS_PER_WORKER", "value": str(spec.slots_per_worker)},
        {"name": "VPIPE_WORKER_HOSTFILE", "value": " ".join(svc_host_file(s.task) for s in slices)},
        *storage_env(spec.storage),
        *code_env(spec.code),
    ]
    image = spec.job.image or DEFAULT_MPI_IMAGE
    volumes, mounts = volumes_and_mounts(spec.code, spec.storage, mount_data=True)
    master = pod_template(
        job=spec.job,
        step=STEP,
        role=spec.master,
        image=spec.master.image or image,
        container_name="mpimaster",
        command=ENTRY_COMMAND,
        args=[*spec.mpiexec_args, *spec.command],
        env=[
            entry_script_env(MPI_MASTER_SCRIPT),
            {"name": "VPIPE_ROLE", "value": MASTER},
            {"name": "VPIPE_MPIEXEC_NARGS", "value": str(len(spec.mpiexec_args))},
            *shared_env,
        ],
        volumes=volumes,
        mounts=mounts,
    )
    gang = task_min_available({MASTER: 1, WORKER: spec.worker.replicas}, spec.job.min_available, elastic=WORKER)
    tasks = [task(MASTER, 1, master, min_available=gang[MASTER], max_retry=spec.job.max_retry, completes_job=True)]
    for part, min_available in zip(slices, split_min_available(slices, gang[WORKER]), strict=True):
        offset = [{"name": TASK_OFFSET_ENV, "value": str(part.offset)}] if part.offset else []
        worker = pod_template(
            job=spec.job,
            step=STEP,
            role=spec.worker,
            image=spec.worker.image or image,
            container_name="mpiworker",
            command=ENTRY_COMMAND,
            args=[],
            env=[entry_script_env(MPI_WORKER_SCRIPT), {"name": "VPIPE_ROLE", "value": WORKER}, *offset, *shared_env],
            volumes=volumes,
            mounts=mounts,
            ports=[{"name": "ssh", "containerPort": 22, "protocol": "TCP"}],
        )
        tasks.append(task(part.task, part.replicas, worker, min_available=min_available,
                          max_retry=spec.job.max_retry, completes_job=False))
    job = job_envelope(spec.job, step=STEP, plugins={"ssh": [], "svc": [], "env": []}, tasks=tasks)
    check_manifest_size(job)
    return job
