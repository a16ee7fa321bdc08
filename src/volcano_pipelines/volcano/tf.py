"""Distributed TensorFlow (parameter servers + workers, optional chief / evaluator) as a
Volcano Job."""

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
from volcano_pipelines.volcano.entrypoint import ENTRY_COMMAND, TF_SCRIPT, entry_script_env
from volcano_pipelines.volcano.slices import TASK_OFFSET_ENV, plan_slices, split_min_available
from volcano_pipelines.volcano.spec import DEFAULT_TF_IMAGE, Role, TFJobSpec
from volcano_pipelines.objects.validate import check_manifest_size
from volcano_pipelines.volcano.validate import validate_tf

__all__ = ["STEP", "build_tf_job", "completing_task", "roles"]

STEP = TRAIN_STEP
# Task order matters only for readability of the rendered YAML.
TASK_ORDER = ("chief", "ps", "worker", "evaluator")


def roles(spec: TFJobSpec) -> dict[str, Role]:
    present = {"chief": spec.chief, "ps": spec.ps, "worker": spec.worker, "evaluator": spec.evaluator}
    return {name: role for name in TASK_ORDER if (role := present[name]) is not None}


def completing_task(spec: TFJobSpec) -> str:
    """Parameter servers never exit: the job is done when the chief (or else the workers) is."""
    return "chief" if spec.chief is not None else "worker"


def build_tf_job(spec: TFJobSpec) -> dict[str, Any]:
    validate_tf(spec)
    finisher = completing_task(spec)
    # Workers split over several tasks (no chief) cannot end the job by one task's completion:
    # Volcano completes it once as many pods succeeded as there are workers (parameter servers
    # never succeed; validation refuses an evaluator beside them), then ends the rest.
    split_finisher = len(plan_slices(spec.job.name, finisher, roles(spec)[finisher].replicas)) > 1
    replicas = {name: role.replicas for name, role in roles(spec).items()}
    # Counts, not hosts: each task builds its view of the cluster at start (tf_cluster.py), so
    # the job does not grow with the square of the replicas.
    shared_env = [
        {"name": "VPIPE_JOB_NAME", "value": spec.job.name},
        {"name": "VPIPE_TF_TASKS", "value": ",".join(f"{name}={n}" for name, n in replicas.items())},
        {"name": "VPIPE_TF_PORT", "value": str(spec.port)},
        {"name": "VPIPE_NUM_SHARDS", "value": str(spec.worker.replicas)},
        *storage_env(spec.storage),
        *code_env(spec.code),
    ]
    gang = task_min_available(replicas, spec.job.min_available, elastic="worker", optional=("evaluator",))
    tasks = []
    for role_name, role in roles(spec).items():
        volumes, mounts = volumes_and_mounts(spec.code, spec.storage, mount_data=role_name != "ps")
        # A role past one task's svc limit is several tasks of one template (volcano/slices.py).
        slices = plan_slices(spec.job.name, role_name, role.replicas)
        for part, min_available in zip(slices, split_min_available(slices, gang[role_name]), strict=True):
            offset = [{"name": TASK_OFFSET_ENV, "value": str(part.offset)}] if part.offset else []
            template = pod_template(
                job=spec.job,
                step=STEP,
                role=role,
                image=role.image or spec.job.image or DEFAULT_TF_IMAGE,
                container_name="tensorflow",
                command=ENTRY_COMMAND,
                args=spec.args,
                env=[entry_script_env(TF_SCRIPT), {"name": "VPIPE_ROLE", "value": role_name}, *offset, *shared_env],
                volumes=volumes,
                mounts=mounts,
                ports=[{"name": "tfjob-port", "containerPort": spec.port, "protocol": "TCP"}],
            )
            tasks.append(
                task(part.task, part.replicas, template, min_available=min_available, max_retry=spec.job.max_retry,
                     completes_job=role_name == finisher and not split_finisher)
            )
    job = job_envelope(spec.job, step=STEP, plugins={"env": [], "svc": []}, tasks=tasks)
    if split_finisher:
        job["spec"]["minSuccess"] = spec.worker.replicas
    check_manifest_size(job)
    return job
