"""The copy pods of a sync over several pods (`vpipe sync --workers N`, docs/sync.md) as one
Volcano Job: task `copy`, N replicas, each running the copy program on the partition its
index names ($VK_TASK_INDEX, Volcano's env plugin) with the destination's PVC mounted where
the program is told the destination is. Pure: spec in, Job dict out."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from volcano_pipelines.labels import VOLCANO_JOB_NAME_LABEL
from volcano_pipelines.volcano.common import job_envelope, pod_template, task
from volcano_pipelines.volcano.spec import JobOptions, Role

__all__ = ["COPY_TASK", "DEST_DIR", "SYNC_STEP", "CopyJobSpec", "build_copy_job", "copy_job_name"]

SYNC_STEP = "sync"
COPY_TASK = "copy"
DEST_VOLUME = "vpipe-dest"
DEST_DIR = "/vpipe/dest"  # where a copy pod sees the destination directory
WORKER_PROGRAM = ("python3", "-m", "volcano_pipelines.transfer.worker")


@dataclass(frozen=True)
class CopyJobSpec:
    job: JobOptions  # name, namespace, image, queue, retries, ttl, run id, owner... (the job's own)
    workers: int
    claim: str  # the PVC holding the destination
    subpath: str | None  # the destination's directory inside the claim (None: its root)
    role: Role  # every copy pod's resources, node selector, tolerations, labels
    spread: bool = False  # prefer one copy pod per node
    # (volume, mount) pairs mounted as they are: the step pod's Secret / ConfigMap volumes that
    # hold the HDFS client's files (keytab, ticket cache, Hadoop configuration).
    config: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = ()


def copy_job_name(run_id: str) -> str:
    """The copy job of a run: named after the run id, so the same step run again finds it."""
    return f"vpipe-sync-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def build_copy_job(spec: CopyJobSpec) -> dict[str, Any]:
    job = spec.job
    mount: dict[str, Any] = {"name": DEST_VOLUME, "mountPath": DEST_DIR}
    if spec.subpath and spec.subpath.strip("/"):
        mount["subPath"] = spec.subpath.strip("/")
    template = pod_template(
        job=job,
        step=SYNC_STEP,
        role=spec.role,
        image=str(job.image),
        container_name=COPY_TASK,
        command=WORKER_PROGRAM,
        args=["--root", DEST_DIR, "--run-id", str(job.run_id)],
        env=[{"name": "PYTHONUNBUFFERED", "value": "1"}],
        volumes=[{"name": DEST_VOLUME, "persistentVolumeClaim": {"claimName": spec.claim}},
                 *(volume for volume, _ in spec.config)],
        mounts=[mount, *(config_mount for _, config_mount in spec.config)],
    )
    if spec.spread:
        template["spec"]["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {VOLCANO_JOB_NAME_LABEL: job.name}}},
        }]}}
    # A copy pod needs no other: the gang is one pod, so the pods start as the queue has room.
    copy = task(COPY_TASK, spec.workers, template, min_available=1, max_retry=job.max_retry, completes_job=False)
    manifest = job_envelope(job, step=SYNC_STEP, plugins={"env": []}, tasks=[copy])
    manifest["spec"]["minAvailable"] = 1
    return manifest
